package pg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// livenessClass is the high half of every liveness lock's key ("home").
const livenessClass = 0x686f6d65

// livenessChannel is LISTENed on by a liveness session, only so that the
// session can wait on its connection: nothing is ever sent on it.
const livenessChannel = "homework_liveness"

// liveness is the session that holds this process's liveness lock.
type liveness struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// HoldLiveness ties the liveness of process id to a database session of its
// own until ctx ends or the store closes: the session holds an advisory
// lock, which PostgreSQL releases the moment the session ends, however the
// process ends (DeadProcesses). When the session is lost, changed(false,
// err) is told at once: other processes may now take this one for dead and
// recover its runs, so it must give up its attempts. The session is then
// taken again, with a new lock, and changed(true, nil) told. HoldLiveness
// returns once the lock is first held; its goroutine exits when ctx ends or
// the store closes. changed must not block.
func (d *DB) HoldLiveness(ctx context.Context, id string, changed func(held bool, err error)) error {
	conn, err := d.takeLiveness(ctx, id)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &liveness{cancel: cancel}
	d.mu.Lock()
	d.lives = append(d.lives, l)
	d.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		d.holdLiveness(lctx, id, conn, changed)
	}()
	return nil
}

func (d *DB) holdLiveness(ctx context.Context, id string, conn *pgx.Conn, changed func(bool, error)) {
	for {
		// Returns only when the connection fails or ctx ends.
		_, err := conn.WaitForNotification(ctx)
		conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		changed(false, err)
		wait := 50 * time.Millisecond
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if conn, err = d.takeLiveness(ctx, id); err == nil {
				break
			}
			wait = min(2*wait, time.Second)
		}
		changed(true, nil)
	}
}

// takeLiveness opens a session of its own, takes a new liveness lock in it
// and records the lock's key with the process.
func (d *DB) takeLiveness(ctx context.Context, id string) (*pgx.Conn, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pg: liveness connection: %w", err)
	}
	conn := c.Hijack()
	fail := func(what string, err error) (*pgx.Conn, error) {
		conn.Close(context.Background())
		return nil, fmt.Errorf("pg: liveness: %s: %w", what, err)
	}
	var key int64
	if err := conn.QueryRow(ctx, `SELECT nextval('process_liveness') & 4294967295`).Scan(&key); err != nil {
		return fail("new key", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(livenessClass)<<32|key).Scan(&ok); err != nil {
		return fail("lock", err)
	} else if !ok {
		return fail("lock", fmt.Errorf("key %d is held by another session", key))
	}
	host, _ := os.Hostname()
	now := d.now().UnixMilli()
	if _, err := conn.Exec(ctx, `INSERT INTO processes (id, host, pid, started_at, heartbeat_at, liveness_key) VALUES ($1, $2, $3, $4, $4, $5)
		ON CONFLICT (id) DO UPDATE SET liveness_key = excluded.liveness_key, heartbeat_at = excluded.heartbeat_at`,
		id, host, os.Getpid(), now, key); err != nil {
		return fail("record", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+livenessChannel); err != nil {
		return fail("listen", err)
	}
	return conn, nil
}

// DeadProcesses returns the processes other than self that hold a running
// run's lease but whose liveness lock is free: their session ended (the
// process died, or lost its connection and gave its attempts up).
//
// Every process asks this every DeathWatchInterval, so the lock table is
// read once per question (livenessKeysHeld), not once per running run: with
// a few dozen runs and processes the per-row form cost 2.5 ms a question.
func (d *DB) DeadProcesses(ctx context.Context, self string) (map[string]bool, error) {
	rows, err := d.pool.Query(ctx, `WITH held AS MATERIALIZED (`+livenessKeysHeld+`)
		SELECT DISTINCT p.id FROM runs r JOIN processes p ON p.id = r.lease_owner
		WHERE r.status = 'running' AND p.id <> $1 AND p.liveness_key IS NOT NULL
		AND p.liveness_key NOT IN (SELECT key FROM held)`, self)
	return stringSet(rows, err)
}

// ProcessLive reports whether process id holds its liveness lock now (a
// process that never took one counts as live: the lease decides for it).
func (tx *Tx) ProcessLive(ctx context.Context, id string) (bool, error) {
	var live bool
	err := tx.PG.QueryRow(ctx, `SELECT p.liveness_key IS NULL OR `+livenessHeld+` FROM processes p WHERE p.id = $1`, id).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return live, err
}

// livenessKeysHeld lists the liveness keys whose lock is held now, as
// key: livenessHeld for every process at once in one read of the lock table.
const livenessKeysHeld = `SELECT l.objid::bigint AS key FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid::bigint = 1752132965 AND l.objsubid = 1`

// livenessHeld is true for a row p of processes whose liveness lock is held
// (by its session: the lock is taken nowhere else).
const livenessHeld = `EXISTS (` + livenessKeysHeld + ` AND l.objid::bigint = p.liveness_key)`

// stopLiveness ends every liveness session (Close).
func (d *DB) stopLiveness() {
	d.mu.Lock()
	lives := d.lives
	d.lives = nil
	d.mu.Unlock()
	for _, l := range lives {
		l.cancel()
		l.wg.Wait()
	}
}
