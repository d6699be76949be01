package pg

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"homework/db/pg/pgtest"
	"homework/engine/spec"
)

// TestEventsKeepTheirUserWhenTheRunUsersMapStartsOver: a committing
// transaction keeps the users it read or learnt for its feed locks and its
// events, so another transaction making the process-wide map start over
// meanwhile (here every third run) changes nothing.
func TestEventsKeepTheirUserWhenTheRunUsersMapStartsOver(t *testing.T) {
	defer func(n int) { maxRunUsers = n }(maxRunUsers)
	maxRunUsers = 2
	ctx := context.Background()
	d, err := Open(ctx, Options{URL: pgtest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	u, err := d.CreateUser(ctx, "starts-over@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	for i := range runs {
		run := &spec.Run{ID: fmt.Sprint("r", i), UserID: u.ID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
			Config: []byte(`{}`), Status: spec.StatusQueued}
		if err := d.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, run) }); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 2 * runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := d.AppendEvent(ctx, fmt.Sprint("r", i%runs), spec.EventToolCall, nil)
			if err != nil {
				t.Error(err)
				return
			}
			if e.UserID != u.ID {
				t.Errorf("event %d of %s has user %d, want %d", e.Seq, e.RunID, e.UserID, u.ID)
			}
		}()
	}
	wg.Wait()
}
