package pg

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// Heartbeat records that the process with engine id is alive at now, and
// forgets processes silent for a day.
func (d *DB) Heartbeat(ctx context.Context, id string, now time.Time) error {
	host, _ := os.Hostname()
	_, err := d.pool.Exec(ctx, `INSERT INTO processes (id, host, pid, started_at, heartbeat_at) VALUES ($1, $2, $3, $4, $4)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`, id, host, os.Getpid(), now.UnixMilli())
	if err != nil {
		return err
	}
	_, err = d.pool.Exec(ctx, `DELETE FROM processes WHERE heartbeat_at < $1`, now.Add(-24*time.Hour).UnixMilli())
	return err
}

// LiveProcesses returns the ids of the processes whose last heartbeat is
// after since and whose liveness, where they hold one, is held.
func (d *DB) LiveProcesses(ctx context.Context, since time.Time) (map[string]bool, error) {
	rows, err := d.pool.Query(ctx, `SELECT id FROM processes p WHERE heartbeat_at > $1 AND (liveness_key IS NULL OR `+livenessHeld+`)`,
		since.UnixMilli())
	return stringSet(rows, err)
}

// stringSet reads a query's one text column into a set.
func stringSet(rows pgx.Rows, err error) (map[string]bool, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out[v] = true
	}
	return out, rows.Err()
}
