package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"homework/engine/spec"
)

// TestTheNextIterationIsNotPolledFor: with River polling once an hour, a
// run's iterations still follow each other, and a continued run resumes:
// each commit that enqueues the next iteration wakes this process's fetch.
func TestTheNextIterationIsNotPolledFor(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, func(o *Options) { o.FetchPollInterval = time.Hour })
		u := h.user("a@example.com")
		r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxIterations: 4}, Script: script(work("1"), work("2"), work("3"), work("4"), work("5"), done("6"))})
		r = h.waitStatus(u, r.ID, spec.StatusStopped)
		if r.Metrics.Iterations != 4 {
			t.Fatalf("metrics %+v", r.Metrics)
		}
		if _, err := h.e.Continue(h.ctx, u.ID, r.ID, &spec.Budgets{MaxIterations: 10}); err != nil {
			t.Fatal(err)
		}
		r = h.waitStatus(u, r.ID, spec.StatusCompleted)
		if r.Metrics.Iterations != 6 {
			t.Fatalf("metrics %+v", r.Metrics)
		}
	})
}

// TestConcurrentRunsAreNotPolledFor: with River polling once an hour,
// eight runs worked at once by four workers all finish: on PostgreSQL
// their transactions overlap, and each commit wakes the fetch for the
// jobs it inserted (TestAWakeBelongsToItsTransaction pins down whose).
func TestConcurrentRunsAreNotPolledFor(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, func(o *Options) { o.FetchPollInterval = time.Hour; o.MaxConcurrentPerUser = 8 })
		u := h.user("a@example.com")
		var ids []string
		for i := range 8 {
			r := h.create(u, spec.Config{Objective: fmt.Sprint("run ", i), Script: script(work("1"), work("2"), work("3"), work("4"), done("5"))})
			ids = append(ids, r.ID)
		}
		for _, id := range ids {
			if r := h.waitStatus(u, id, spec.StatusCompleted); r.Metrics.Iterations != 5 {
				t.Fatalf("run %s: metrics %+v", id, r.Metrics)
			}
		}
	})
}

// TestAWakeBelongsToItsTransaction: a commit wakes the queues its own
// transaction inserted into, and leaves another transaction's, still
// open, for that one's commit; a rolled-back write wakes nothing.
func TestAWakeBelongsToItsTransaction(t *testing.T) {
	type fakeTx struct {
		spec.Tx
		n int
	}
	var woken [][]string
	w := &waker{pilot: &wakingPilot{}}
	w.pilot.notify = func(_ context.Context, res []*rivertype.JobInsertResult) {
		var qs []string
		for _, r := range res {
			qs = append(qs, r.Job.Queue)
		}
		slices.Sort(qs)
		woken = append(woken, qs)
	}
	ctx := context.Background()
	t1, t2, t3, t4 := &fakeTx{n: 1}, &fakeTx{n: 2}, &fakeTx{n: 3}, &fakeTx{n: 4}
	w.inserted(t1, "")
	w.inserted(t1, "webhook")
	w.inserted(t2, "")
	w.ended(ctx, []spec.Tx{t2}, true) // t2 commits first
	w.ended(ctx, []spec.Tx{t1}, true) // then t1: its wake is still there
	w.inserted(t3, "")
	w.ended(ctx, []spec.Tx{t3}, false) // rolled back
	w.inserted(t3, "webhook")          // a retried write: t3 rolled back, t4 committed
	w.inserted(t4, "")
	w.ended(ctx, []spec.Tx{t3, t4}, true)
	want := [][]string{{"default"}, {"default", "webhook"}, {"default"}}
	if fmt.Sprint(woken) != fmt.Sprint(want) {
		t.Fatalf("woken %v, want %v", woken, want)
	}
	if len(w.pending) != 0 {
		t.Fatalf("%d transactions still pending", len(w.pending))
	}
}
