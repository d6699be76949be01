package pg

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/pg/pgtest"
)

// prepared returns the statements prepared on conn's session, with how
// many generic plans each has made.
func prepared(t *testing.T, conn *pgx.Conn) map[string]int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT statement, generic_plans FROM pg_prepared_statements`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	var sql string
	var generic int64
	if _, err := pgx.ForEachRow(rows, []any{&sql, &generic}, func() error {
		out[sql] = generic
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// hasRiverInsert reports whether River's job insert is among statements.
func hasRiverInsert(statements map[string]int64) bool {
	for sql := range statements {
		if strings.Contains(sql, "name: JobInsertFastMany :many") {
			return true
		}
	}
	return false
}

// TestTheStoresConnectionsComeWithTheWritePathPrepared: every connection
// of the pool, the ones made before the tables were there included, has
// River's job insert and the announcements prepared and the events' insert
// planned before any write runs on it, so that no write parses or plans
// them while it holds a lock another process waits for.
func TestTheStoresConnectionsComeWithTheWritePathPrepared(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, Options{URL: pgtest.NewDatabase(t), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// One connection migrated the new database; take as many as the pool
	// holds, so that the others are made now.
	var conns []*pgx.Conn
	for range d.pool.Config().MaxConns {
		c, err := d.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		conns = append(conns, c.Conn())
	}
	for i, conn := range conns {
		statements := prepared(t, conn)
		if generic, ok := statements[insertSQL]; !ok || generic == 0 {
			t.Errorf("connection %d: the events' insert prepared %v, run %d times with its generic plan; want prepared and planned", i, ok, generic)
		}
		for _, sql := range []string{tryAnnounceSQL, announceSQL} {
			if _, ok := statements[sql]; !ok {
				t.Errorf("connection %d: an announcement is not prepared: %.60s…", i, sql)
			}
		}
		if !hasRiverInsert(statements) {
			t.Errorf("connection %d: River's job insert is not prepared", i)
		}
	}
}

// TestPreparingAConnectionDoesNotWaitForTheFeedLock: a connection made
// while the feed lock is held exclusively (a horizon being read, waiting
// for a writer in its commit) still has the events' insert planned, and
// is not held up: the insert takes a lock of its own (warmLock). Were it
// to wait for the feed lock, it would give up after its lock timeout and
// pgx would drop it, unplanned.
func TestPreparingAConnectionDoesNotWaitForTheFeedLock(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	d, err := Open(ctx, Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1::int4, 0)`, int32(feedLock)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		warmConn(ctx, conn)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a guard
		holder.Close(ctx) // lets it go on, so that the test ends
		<-done
		t.Fatal("preparing the connection waited for the feed lock")
	}
	statements := prepared(t, conn)
	if statements[insertSQL] == 0 {
		t.Error("the events' insert was not planned while the feed lock was held exclusively")
	}
	if !hasRiverInsert(statements) {
		t.Error("River's job insert was not prepared")
	}
}
