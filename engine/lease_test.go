package engine

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"homework/db"
	"homework/engine/scripted"
	"homework/engine/spec"
	"homework/engine/waitfor"
)

// snapshot is everything a finishing attempt could write for a run.
type snapshot struct {
	run    spec.Run
	events int
	iters  []spec.Iteration
}

func (h *harness) snapshot(u *spec.User, runID string) snapshot {
	h.t.Helper()
	r, err := h.db.FindRun(h.ctx, u.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	its, err := h.db.ListIterations(h.ctx, u.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	s := snapshot{run: *r, events: len(h.events(u, runID))}
	for _, it := range its {
		s.iters = append(s.iters, *it)
	}
	return s
}

// unstartedEngine is a real engine over a real database whose River client
// never starts, so the test drives attempts itself.
func unstartedEngine(t *testing.T) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bus := NewBus()
	d, err := db.Open(ctx, db.Options{Path: filepath.Join(t.TempDir(), "s.db"), OnEvents: bus.Publish})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e, err := New(Options{Backend: sqliteBackend(d), Bus: bus, Executors: map[string]Executor{spec.ExecutorScript: &scripted.Executor{InTx: d.WriteTx}}})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, db: d, bus: bus, e: e, ctx: ctx}
}

func TestStaleAttemptFinishWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		moveOn  func(h *harness, u *spec.User, runID string)
		wantEnd spec.EventType
		// keepLines is whether the attempt's transcript is kept: a
		// canceled run keeps what its agent did; a recovered one's new
		// attempt owns the iteration.
		keepLines int
	}{
		{"recovered", func(h *harness, u *spec.User, runID string) {
			if ok, err := h.e.recoverRun(h.ctx, runID, h.e.id, false, true, nil); err != nil || !ok {
				h.t.Fatalf("recover: %v %v", ok, err)
			}
		}, "run_recovered", 0},
		{"canceled", func(h *harness, u *spec.User, runID string) {
			if _, err := h.e.Cancel(h.ctx, u.ID, runID); err != nil {
				h.t.Fatal(err)
			}
		}, "run_canceled", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := unstartedEngine(t)
			u := h.user("stale@example.com")
			r := h.create(u, spec.Config{Script: script(done("finished"))})
			it, err := h.e.beginIteration(h.ctx, IterateArgs{RunID: r.ID, Iteration: 1, Attempt: 1})
			if err != nil || it == nil {
				t.Fatalf("begin: %v", err)
			}
			out := &outcome{res: &spec.Result{Summary: "late"}, status: spec.IterSucceeded,
				decision:  spec.Decision{Decision: spec.DecisionComplete, Reasons: []string{"late"}},
				metrics:   spec.Metrics{Iterations: 1, ToolCallsTotal: 7, RunningMS: 5},
				narrative: "a late narrative"}
			hostOf(it).Transcribe(h.ctx, spec.TranscriptEntry{Kind: spec.TranscriptAssistant, Text: "a late line"})

			tc.moveOn(h, u, r.ID)
			before := h.snapshot(u, r.ID)
			// The stale attempt's renewal neither extends the new lease nor succeeds.
			if ok, err := h.db.RenewAttemptLease(h.ctx, r.ID, h.e.id, 1, 1, time.Now().Add(time.Hour)); err != nil || ok {
				t.Fatalf("a stale attempt renewed the lease: %v %v", ok, err)
			}
			committed, _, err := h.e.finishIteration(h.ctx, it, out)
			if err != nil || committed {
				t.Fatalf("stale finish: committed=%v err=%v", committed, err)
			}
			hostOf(it).flushTranscript(h.ctx) // what iterate defers
			after := h.snapshot(u, r.ID)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("a stale finish changed the record:\nbefore %+v\nafter  %+v", before, after)
			}
			tr, err := h.db.FindTranscript(h.ctx, u.ID, r.ID, 1, 0, 0)
			if err != nil || len(tr.Lines) != tc.keepLines {
				t.Fatalf("the stale attempt's transcript: %d lines (%v), want %d", len(tr.Lines), err, tc.keepLines)
			}
			evs := h.events(u, r.ID)
			if last := evs[len(evs)-1].Type; last != tc.wantEnd {
				t.Fatalf("last event %s, want %s", last, tc.wantEnd)
			}
		})
	}
}

// TestCancelDuringAnIterationEndsWithTheTerminalEvent cancels a run while
// its iteration works (in the executor, and in a command check) and checks
// that nothing follows run_canceled and the metrics do not move after it.
func TestCancelDuringAnIterationEndsWithTheTerminalEvent(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  spec.Config
	}{
		{"in the executor", spec.Config{Script: script(scripted.Step{SleepMS: 60_000})}},
		{"in a command check", spec.Config{Script: script(scripted.Step{Summary: "quick", Tools: 3,
			LLM: []spec.LLMCall{{Role: "planner", Model: "m", PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.01, Priced: true}}}),
			Agent: &spec.Agent{Workdir: dir},
			Completion: spec.Completion{Checks: []spec.CheckSpec{{Type: spec.CheckCommand, Name: "slow",
				Argv: []string{"sh", "-c", "echo > check-started; sleep 60"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			u := h.user("cancel@example.com")
			started := waitfor.Pipe(t, filepath.Join(dir, "check-started"), 20*time.Second)
			r := h.create(u, tc.cfg)
			if tc.cfg.Agent != nil {
				started()
			} else {
				h.waitFor(u, r.ID, "iteration started", func(r *spec.Run) bool { return r.LeaseOwner != "" })
			}
			if _, err := h.e.Cancel(h.ctx, u.ID, r.ID); err != nil {
				t.Fatal(err)
			}
			frozen := h.snapshot(u, r.ID)
			// Wait for the canceled attempt to return (its worker slot frees).
			h.waitInflightGone(r.ID)
			after := h.snapshot(u, r.ID)
			if !reflect.DeepEqual(frozen, after) {
				t.Fatalf("the record changed after the cancel:\nat cancel %+v\nafter      %+v", frozen, after)
			}
			evs := h.events(u, r.ID)
			if last := evs[len(evs)-1].Type; last != "run_canceled" {
				var types []string
				for _, e := range evs {
					types = append(types, string(e.Type))
				}
				t.Fatalf("last event %s: %s", last, strings.Join(types, " "))
			}
			if len(after.iters) != 1 || after.iters[0].Status != spec.IterCanceled {
				t.Fatalf("iterations %+v", after.iters)
			}
			if tc.cfg.Agent != nil && after.run.Metrics.TokensTotal != 15 {
				t.Fatalf("the canceled iteration's spend is not counted: %+v", after.run.Metrics)
			}
			h.checkMetricsAddUp(u, r.ID)
		})
	}
}

// waitInflightGone waits until the run's attempt in flight, if any, has
// returned.
func (h *harness) waitInflightGone(runID string) {
	h.t.Helper()
	h.e.mu.Lock()
	f := h.e.inflight[runID]
	h.e.mu.Unlock()
	if f == nil {
		return
	}
	select {
	case <-f.done:
	case <-time.After(20 * time.Second):
		h.t.Fatal("the canceled attempt never returned")
	}
}

// TestShutdownLetsAnIterationWithinTheGraceFinish: Stop stops taking jobs
// but an iteration that ends within the grace is recorded as it ended, and
// the run's next iteration waits for the next start.
func TestShutdownLetsAnIterationWithinTheGraceFinish(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.ShutdownGrace = 20 * time.Second })
	u := h.user("grace@example.com")
	dir := t.TempDir()
	started := waitfor.Pipe(t, filepath.Join(dir, "started"), 20*time.Second)
	r := h.create(u, spec.Config{Script: script(work("one"), work("two")), Agent: &spec.Agent{Workdir: dir},
		Completion: spec.Completion{Checks: []spec.CheckSpec{{Type: spec.CheckCommand, Name: "short",
			Argv: []string{"sh", "-c", "echo > started; sleep 1"}}}}})
	started()
	if err := h.e.Stop(h.ctx); err != nil {
		t.Fatal(err)
	}
	its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
	if len(its) != 1 || its[0].Status != spec.IterSucceeded {
		t.Fatalf("the in-flight iteration did not finish within the grace: %+v", its)
	}
	got, _ := h.db.FindRun(h.ctx, u.ID, r.ID)
	if got.Status != spec.StatusRunning || got.Iteration != 2 || got.LeaseOwner != "" {
		t.Fatalf("run after shutdown: %s iteration %d owner %q", got.Status, got.Iteration, got.LeaseOwner)
	}
}

// slowNarrator is the scripted executor with a summarizer that takes longer
// than several lease TTLs.
type slowNarrator struct {
	*scripted.Executor
	delay time.Duration
}

func (n *slowNarrator) Narrate(ctx context.Context, run *spec.Run, cfg *spec.Config, report *spec.Report) (string, error) {
	select {
	case <-time.After(n.delay):
		return "It went well.", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// TestASlowSummarizerDoesNotGetTheIterationRecovered: the lease covers the
// summarizer too, so an iteration whose summary takes several TTLs runs once.
func TestASlowSummarizerDoesNotGetTheIterationRecovered(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.LeaseTTL, o.RecoveryInterval = 300*time.Millisecond, 50*time.Millisecond
		o.Executors[spec.ExecutorScript] = &slowNarrator{Executor: o.Executors[spec.ExecutorScript].(*scripted.Executor), delay: 1500 * time.Millisecond}
	})
	u := h.user("narrate@example.com")
	r := h.create(u, spec.Config{Script: script(done("finished"))})
	r = h.waitStatus(u, r.ID, spec.StatusCompleted)
	evs := h.events(u, r.ID)
	if n := countType(evs, "iteration_started"); n != 1 || countType(evs, "run_recovered") != 0 {
		t.Fatalf("%d attempts, %d recoveries for one iteration", n, countType(evs, "run_recovered"))
	}
	if r.Report == nil || r.Report.Summary != "It went well." {
		t.Fatalf("report %+v", r.Report)
	}
}
