package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/pg/pgtest"
)

// TestALostLivenessSessionIsToldAndTakenAgain: when the session holding a
// process's liveness is killed, the process is told at once, takes a new
// one, and is told again.
func TestALostLivenessSessionIsToldAndTakenAgain(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	d := open(t, url, nil)
	changes := make(chan bool, 4)
	if err := d.HoldLiveness(ctx, "p1", func(held bool, err error) { changes <- held }); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// The liveness session is the one LISTENing on its channel.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN homework_liveness%'`); err != nil {
		t.Fatal(err)
	}
	for _, want := range []bool{false, true} {
		select {
		case held := <-changes:
			if held != want {
				t.Fatalf("told held=%v, want %v", held, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("not told held=%v", want)
		}
	}
	if dead, err := open(t, url, nil).DeadProcesses(ctx, "other"); err != nil || dead["p1"] {
		t.Fatalf("dead after the liveness was taken again: %v %v", dead, err)
	}
}

// TestUnavailableTellsAnOutageFromAFault: a refused connection is an
// outage; a statement's own error is not.
func TestUnavailableTellsAnOutageFromAFault(t *testing.T) {
	ctx := context.Background()
	d := open(t, pgtest.NewDatabase(t), nil)
	_, err := pgx.Connect(ctx, "postgres://nobody@127.0.0.1:1/nothing?connect_timeout=2")
	if err == nil || !d.Unavailable(err) {
		t.Fatalf("a refused connection (%v) is not unavailable", err)
	}
	_, err = d.Pool().Exec(ctx, `SELEC 1`)
	if err == nil || d.Unavailable(err) {
		t.Fatalf("a syntax error (%v) counts as unavailable", err)
	}
	if d.Unavailable(nil) || d.Unavailable(context.Canceled) {
		t.Fatal("nil or a cancellation counts as unavailable")
	}
}
