package engine

import (
	"fmt"
	"testing"
	"time"

	"homework/db"
	"homework/db/pg"
	"homework/engine/scripted"
	"homework/engine/spec"
)

// iterateJobs counts every iterate job the run ever had, whatever its state.
func (h *harness) iterateJobs(runID string) int {
	h.t.Helper()
	var n int
	var err error
	switch d := h.db.(type) {
	case *db.DB:
		err = d.Reader().QueryRowContext(h.ctx, `SELECT COUNT(*) FROM river_job WHERE kind = 'iterate' AND args ->> 'run_id' = ?`, runID).Scan(&n)
	case *pg.DB:
		err = d.Pool().QueryRow(h.ctx, `SELECT COUNT(*) FROM river_job WHERE kind = 'iterate' AND args ->> 'run_id' = $1`, runID).Scan(&n)
	default:
		h.t.Fatalf("no job count for %T", h.db)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// A worker goes on with its run's next iterations itself, each begun in
// the transaction that finished the one before, for ContinueFor from its
// job's start; then it enqueues the next one. Either way every iteration
// runs once, in order, with its events gap-free and its metrics adding up.
func TestAWorkerGoesOnWithItsRunsNextIterations(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		for _, c := range []struct {
			name        string
			continueFor time.Duration
			sleepMS     int64
			jobs        func(n int) bool
			want        string
		}{
			{"at once, in one job", 0, 0, func(n int) bool { return n == 1 }, "1"},
			{"never", -1, 0, func(n int) bool { return n == 8 }, "8, one per iteration"},
			// 60 ms iterations and 150 ms of going on: more than one job
			// (how many depends on the machine's speed).
			{"until its time is up", 150 * time.Millisecond, 60, func(n int) bool { return n >= 2 }, "2 or more"},
		} {
			t.Run(c.name, func(t *testing.T) {
				h := newHarnessOn(t, store, func(o *Options) { o.ContinueFor = c.continueFor })
				u := h.user("continue@example.com")
				var steps []scripted.Step
				for i := 1; i < 8; i++ {
					s := work(fmt.Sprint("step ", i))
					s.SleepMS = c.sleepMS
					steps = append(steps, s)
				}
				last := done("step 8")
				last.SleepMS = c.sleepMS
				r := h.create(u, spec.Config{Script: script(append(steps, last)...)})
				h.waitStatus(u, r.ID, spec.StatusCompleted)

				if n := h.iterateJobs(r.ID); !c.jobs(n) {
					t.Errorf("%d iterate jobs for 8 iterations, want %s", n, c.want)
				}
				its, err := h.db.ListIterations(h.ctx, u.ID, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if len(its) != 8 {
					t.Fatalf("%d iterations recorded, want 8", len(its))
				}
				for i, it := range its {
					if it.Iteration != i+1 || it.Attempt != 1 || it.Status != spec.IterSucceeded || it.Summary != fmt.Sprint("step ", i+1) {
						t.Errorf("iteration %d: %d attempt %d %s %q", i+1, it.Iteration, it.Attempt, it.Status, it.Summary)
					}
				}
				evs := h.events(u, r.ID)
				for i, e := range evs {
					if e.Seq != int64(i+1) {
						t.Fatalf("event %d has seq %d", i+1, e.Seq)
					}
				}
				if n := countType(evs, spec.EventIterationStarted); n != 8 {
					t.Errorf("%d iteration_started events, want 8", n)
				}
				h.checkMetricsAddUp(u, r.ID)
			})
		}
	})
}
