package engine

import (
	"context"
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

// The attempt an iteration's finishing transaction began takes the
// finished attempt's place in inflight at once: an interrupt that reached
// the finished attempt after its outcome committed (a cancel) is the next
// one's, a lost lease (a renewal that found the run moved on) is not, and
// an interrupt after the hand-over reaches the next attempt.
func TestTheNextAttemptTakesOverInterrupts(t *testing.T) {
	h := unstartedEngine(t)
	for _, c := range []struct {
		name  string
		cause error // what reached the finished attempt, nil: nothing
		want  error // the next attempt's cause, nil: live
	}{
		{"a cancel after the commit", errRunCanceled, errRunCanceled},
		{"shutdown", errShutdown, errShutdown},
		{"the finished attempt's lease", errLeaseLost, nil},
		{"nothing", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			runID := "run-" + c.name
			it := func(n int) *iteration {
				return &iteration{run: &spec.Run{ID: runID}, row: &spec.Iteration{RunID: runID, Iteration: n, Attempt: 1}}
			}
			prev := it(1)
			prev.held = h.e.hold(h.ctx, prev)
			h.e.mu.Lock()
			h.e.trackLocked(runID, prev.held.fl)
			h.e.mu.Unlock()
			if c.cause != nil {
				h.e.InterruptLocal(runID, c.cause)
			}
			next := it(2)
			h.e.handOver(h.ctx, prev.held, next)
			h.e.untrack(runID, prev.held.fl) // the finished attempt returns
			prev.held.release()
			defer next.held.release()

			if got := context.Cause(next.held.iterCtx); got != c.want {
				t.Fatalf("the next attempt's cause = %v, want %v", got, c.want)
			}
			if !h.e.executing(runID) {
				t.Fatal("the next attempt is not the run's attempt in inflight")
			}
			if c.want == nil {
				h.e.InterruptLocal(runID, errRunCanceled)
				if got := context.Cause(next.held.iterCtx); got != errRunCanceled {
					t.Fatalf("an interrupt after the hand-over: cause %v, want %v", got, errRunCanceled)
				}
			}
		})
	}
}

// A stopping engine lets its iterations finish but begins none in place:
// the run's next iteration is enqueued, for the next start to work, not
// begun and then cut short by the end of the grace.
func TestAStoppingEngineBeginsNoIterationInPlace(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("stop@example.com")
	first := work("one")
	first.SleepMS = 300
	r := h.create(u, spec.Config{Script: script(first, done("two"))})
	h.waitFor(u, r.ID, "iteration 1 running", func(r *spec.Run) bool { return r.Iteration == 1 && r.LeaseOwner != "" })
	sctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	if err := h.e.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	run, err := h.db.FindRun(h.ctx, u.ID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	its, err := h.db.ListIterations(h.ctx, u.ID, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != spec.StatusRunning || run.Iteration != 2 || run.LeaseOwner != "" || len(its) != 1 || its[0].Status != spec.IterSucceeded {
		t.Fatalf("after stop: run %s at iteration %d leased to %q, %d iteration rows; want iteration 1 finished and 2 enqueued, unleased",
			run.Status, run.Iteration, run.LeaseOwner, len(its))
	}
	if n := h.iterateJobs(r.ID); n != 2 {
		t.Fatalf("%d iterate jobs, want 2 (iteration 2's enqueued)", n)
	}
}
