package pg

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/engine/spec"
)

// Command runs are bound to a host: see the engine's hostqueue.go.

// CommandHeartbeat is Heartbeat for a process that runs command runs: it
// also records the host id, command-run root and job queue it serves.
func (d *DB) CommandHeartbeat(ctx context.Context, id string, now time.Time, host, root, queue string) error {
	hostname, _ := os.Hostname()
	_, err := d.pool.Exec(ctx, `INSERT INTO processes (id, host, pid, started_at, heartbeat_at, command_host, command_root, command_queue)
		VALUES ($1, $2, $3, $4, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, command_host = excluded.command_host,
			command_root = excluded.command_root, command_queue = excluded.command_queue`,
		id, hostname, os.Getpid(), now.UnixMilli(), host, root, queue)
	if err != nil {
		return err
	}
	_, err = d.pool.Exec(ctx, `DELETE FROM processes WHERE heartbeat_at < $1`, now.Add(-24*time.Hour).UnixMilli())
	return err
}

// LiveCommandQueues returns the command-run queues served by a process
// whose last heartbeat is after since and whose liveness, where it holds
// one, is held.
func (d *DB) LiveCommandQueues(ctx context.Context, since time.Time) (map[string]bool, error) {
	rows, err := d.pool.Query(ctx, `SELECT DISTINCT command_queue FROM processes p WHERE heartbeat_at > $1 AND command_queue IS NOT NULL
		AND (liveness_key IS NULL OR `+livenessHeld+`)`, since.UnixMilli())
	return stringSet(rows, err)
}

// HostWaitingRuns returns the runs waiting because no process served their
// host (waiting reason host_unavailable), by run id, with their queue.
func (d *DB) HostWaitingRuns(ctx context.Context) (map[string]string, error) {
	rows, err := d.pool.Query(ctx, `SELECT r.id, h.queue FROM runs r JOIN run_hosts h ON h.run_id = r.id
		WHERE r.status = $1 AND r.waiting IS NOT NULL AND r.waiting::jsonb ->> 'reason' = $2 ORDER BY r.created_at`,
		spec.StatusWaiting, spec.WaitHostUnavailable)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, q string
		if err := rows.Scan(&id, &q); err != nil {
			return nil, err
		}
		out[id] = q
	}
	return out, rows.Err()
}

// BindRunHost records, in tx, that the run's iterations run only on the
// host and root given, through queue.
func (tx *Tx) BindRunHost(ctx context.Context, runID, host, root, queue string) error {
	_, err := tx.PG.Exec(ctx, `INSERT INTO run_hosts (run_id, host, root, queue) VALUES ($1, $2, $3, $4)`, runID, host, root, queue)
	return err
}

// RunHost returns the host, root and queue the run is bound to, or empty
// strings for a run any process may work.
func (tx *Tx) RunHost(ctx context.Context, runID string) (host, root, queue string, err error) {
	err = tx.PG.QueryRow(ctx, `SELECT host, root, queue FROM run_hosts WHERE run_id = $1`, runID).Scan(&host, &root, &queue)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", "", nil
	}
	return host, root, queue, err
}
