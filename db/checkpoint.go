package db

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"modernc.org/sqlite"
)

// checkpointEvery is the shortest time between two WAL checkpoints.
const checkpointEvery = 100 * time.Millisecond

// checkpointIdle is how often the WAL is checkpointed without commits of
// ours: River writes on the same connection by itself (leader elections,
// maintenance), which an idle server would otherwise let pile up.
const checkpointIdle = 30 * time.Second

// restartFrames is the WAL size (in pages) past which a checkpoint that
// could not finish off the write path is finished on the writer's own
// connection, so the next write starts the WAL over: 16 MiB of 4 KiB pages.
const restartFrames = 4096

// checkpointer copies the WAL back into the database file off the write
// path. SQLite's automatic checkpoint runs inside the commit that crosses
// its threshold, and its fsyncs then hold the one writer, so every writer
// behind it waits (half the engine's wall time under load went there). The
// writer connection has the automatic checkpoint turned off; this goroutine
// runs a PASSIVE checkpoint on its own connection after commits, at most
// every checkpointEvery. A PASSIVE checkpoint takes only the checkpoint
// lock: writers keep appending to the WAL while it runs.
//
// The WAL starts over only when a write begins with all of it copied,
// which a busy writer never sees (it appends while the checkpoint copies):
// once the WAL is past restartFrames, the checkpoint is finished on the
// writer's own connection, between two of its transactions, with only
// what came in since left to copy.
type checkpointer struct {
	conn   *sql.DB
	writer *sql.DB
	kick   chan struct{}
	stop   chan struct{}
	done   sync.WaitGroup
	once   sync.Once
}

func newCheckpointer(path string, writer *sql.DB) *checkpointer {
	c := &checkpointer{
		conn:   sql.OpenDB(&cachingConnector{dsn: dsn(path, false), drv: &sqlite.Driver{}}),
		writer: writer,
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
	}
	c.conn.SetMaxOpenConns(1)
	c.conn.SetMaxIdleConns(1)
	c.done.Add(1)
	go c.loop()
	return c
}

// committed tells the checkpointer a write committed. It never blocks.
func (c *checkpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop() {
	defer c.done.Done()
	idle := time.NewTicker(checkpointIdle)
	defer idle.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		case <-idle.C:
		}
		// A checkpoint that fails (the file gone, the disk full) is
		// retried after the next commit, as SQLite's own would be.
		var busy, frames, copied int
		err := c.conn.QueryRowContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
		if err == nil && frames > restartFrames {
			c.writer.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
		}
		select {
		case <-c.stop:
			return
		case <-time.After(checkpointEvery):
		}
	}
}

// close stops the goroutine, then checkpoints what is left. It may be
// called more than once.
func (c *checkpointer) close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		c.done.Wait()
		c.conn.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
		err = c.conn.Close()
	})
	return err
}
