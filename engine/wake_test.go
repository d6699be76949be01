package engine

import (
	"testing"
	"time"

	"homework/engine/spec"
)

// TestTheNextIterationIsNotPolledFor: with River polling once an hour, a
// run's iterations still follow each other, and a continued run resumes:
// each commit that enqueues the next iteration wakes this process's fetch
// (SQLite; PostgreSQL's listener does the same across processes).
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
