package pg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/pg"
	"homework/db/pg/pgtest"
	"homework/engine/spec"
)

// TestLivenessEndsWithTheSession: a process holding its liveness is not
// dead to the others; once its session ends (here: the store closes, as at
// a process's death), the others see it dead at once while it holds a
// running run's lease.
func TestLivenessEndsWithTheSession(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	watcher := open(t, url, nil)
	victim, err := pg.Open(ctx, pg.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.HoldLiveness(ctx, "victim", func(bool, error) {}); err != nil {
		t.Fatal(err)
	}
	if err := watcher.HoldLiveness(ctx, "watcher", func(bool, error) {}); err != nil {
		t.Fatal(err)
	}
	u, err := watcher.CreateFirstUser(ctx, "live@example.com", "x")
	if err != nil {
		t.Fatal(err)
	}
	err = watcher.WriteTx(ctx, func(tx spec.Tx) error {
		return tx.InsertRun(ctx, &spec.Run{ID: "r1", UserID: u.ID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
			Config: []byte(`{}`), Status: spec.StatusRunning, Iteration: 1, Attempt: 1, LeaseOwner: "victim", LeaseUntil: time.Now().Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := watcher.DeadProcesses(ctx, "watcher")
	if err != nil || len(dead) != 0 {
		t.Fatalf("dead processes while the victim lives: %v %v", dead, err)
	}
	live, err := watcher.LiveProcesses(ctx, time.Now().Add(-time.Hour))
	if err != nil || !live["victim"] {
		t.Fatalf("live processes %v (%v): want the victim", live, err)
	}
	victim.Close()
	// The server ends the session's backend, and releases its locks, a
	// moment after the connection closes: look again until it has.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		dead, err = watcher.DeadProcesses(ctx, "watcher")
		if err != nil || dead["victim"] || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !dead["victim"] {
		t.Fatalf("dead processes after the victim's session ended: %v %v", dead, err)
	}
	if live, _ := watcher.LiveProcesses(ctx, time.Now().Add(-time.Hour)); live["victim"] {
		t.Fatal("a process whose liveness is gone is still live by its heartbeat")
	}
	err = watcher.WriteTx(ctx, func(tx spec.Tx) error {
		for id, want := range map[string]bool{"victim": false, "watcher": true} {
			if live, err := tx.(spec.ClusterTx).ProcessLive(ctx, id); err != nil || live != want {
				t.Errorf("ProcessLive(%s) = %v, %v; want %v", id, live, err, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

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
