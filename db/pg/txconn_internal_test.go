package pg

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"homework/db/pg/pgtest"
)

// TestTheTransactionSendsHeldWritesFirst checks the ways of using a write
// transaction's pgx.Tx that cannot take the held writes along in their own
// round trip (a savepoint, a prepared statement, COPY): each sends them
// first, so the write is in before them. And rows read to their end free
// the connection for the next statement without Close, as a plain query's.
func TestTheTransactionSendsHeldWritesFirst(t *testing.T) {
	d, _ := openInternal(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	userWithRuns(t, d, "r")
	for name, use := range map[string]func(tx pgx.Tx) error{
		"Begin": func(tx pgx.Tx) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			return sp.Commit(ctx)
		},
		"Prepare": func(tx pgx.Tx) error {
			_, err := tx.Prepare(ctx, "held_first", "SELECT 1")
			return err
		},
		"CopyFrom": func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"copied"}, []string{"x"}, pgx.CopyFromRows([][]any{{1}}))
			return err
		},
		"rows read to their end": func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT 1`)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			_, err = tx.Exec(ctx, `SELECT 2`)
			return err
		},
	} {
		err := d.write(ctx, func(tx *Tx) error {
			if _, err := tx.PG.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS copied (x int)`); err != nil {
				return err
			}
			run, err := tx.FindRun(ctx, "r")
			if err != nil {
				return err
			}
			run.Objective = name
			if err := tx.UpdateRun(ctx, run); err != nil {
				return err
			}
			if len(tx.conn.pending) != 1 {
				t.Fatalf("%s: %d writes held, want the update", name, len(tx.conn.pending))
			}
			if err := use(tx.PG); err != nil {
				return err
			}
			if len(tx.conn.pending) != 0 {
				t.Errorf("%s left %d writes held", name, len(tx.conn.pending))
			}
			var got string
			if err := tx.conn.tx.QueryRow(ctx, `SELECT objective FROM runs WHERE id = 'r'`).Scan(&got); err != nil || got != name {
				t.Errorf("%s: the run's objective is %q (%v), want the held update's %q", name, got, err, name)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestAStatementThatCannotBePreparedIsNotBlamedOnAHeldWrite checks that
// a statement PostgreSQL refuses to prepare, sent after a held write,
// fails with its own error, not the write's name: the write never went
// out.
func TestAStatementThatCannotBePreparedIsNotBlamedOnAHeldWrite(t *testing.T) {
	d, _ := openInternal(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	userWithRuns(t, d, "r")
	err := d.write(ctx, func(tx *Tx) error {
		run, err := tx.FindRun(ctx, "r")
		if err != nil {
			return err
		}
		if err := tx.UpdateRun(ctx, run); err != nil {
			return err
		}
		_, err = tx.conn.Exec(ctx, `SELECT no_such_column FROM runs`)
		return err
	})
	if err == nil || strings.Contains(err.Error(), "update run") || !strings.Contains(err.Error(), "no_such_column") {
		t.Fatalf("a statement that cannot be prepared, after a held update: %v", err)
	}
}
