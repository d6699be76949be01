package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"homework/db/pg"
	"homework/engine/scripted"
	"homework/engine/spec"
)

func TestRunCompletesWithGapFreeEventsAndMetricsThatAddUp(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		u := h.user("a@example.com")
		r := h.create(u, spec.Config{Script: script(
			scripted.Step{Summary: "one", Status: &spec.Status{RemainingWork: []string{"two"}}, Tools: 2,
				LLM: []spec.LLMCall{{Role: "planner", Model: "m1", PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.01, Priced: true}}},
			scripted.Step{Summary: "two", Status: &spec.Status{RemainingWork: []string{"three"}}, Tools: 1,
				LLM: []spec.LLMCall{{Role: "planner", Model: "m2", PromptTokens: 10, CompletionTokens: 5, Priced: false}}},
			done("three"),
		)})
		if r.Status != spec.StatusRunning {
			t.Fatalf("a run with a free slot starts at once; got %s", r.Status)
		}
		r = h.waitStatus(u, r.ID, spec.StatusCompleted)
		if r.Metrics.Iterations != 3 || r.Metrics.ToolCallsTotal != 3 || r.Metrics.TokensTotal != 135 || r.Metrics.UnpricedCalls != 1 {
			t.Fatalf("metrics = %+v", r.Metrics)
		}
		if r.Metrics.ByModel["m2"].Unpriced != true || r.Metrics.ByModel["m1"].CostUSD != 0.01 {
			t.Fatalf("by model = %+v", r.Metrics.ByModel)
		}
		h.checkMetricsAddUp(u, r.ID)
		evs := h.events(u, r.ID)
		if evs[0].Type != "run_created" || evs[len(evs)-1].Type != "run_completed" {
			t.Fatalf("first/last events: %s %s", evs[0].Type, evs[len(evs)-1].Type)
		}
		for typ, n := range map[spec.EventType]int{"iteration_started": 3, "iteration_completed": 3, "gate_decision": 3, "run_completed": 1, "llm_call": 2, "iteration_cost_update": 2} {
			if got := countType(evs, typ); got != n {
				t.Errorf("%d %s events, want %d", got, typ, n)
			}
		}
		if r.StopReason == nil || r.StopReason.Type != spec.StopCompleted || r.CompletedAt.IsZero() {
			t.Fatalf("stop reason %+v", r.StopReason)
		}
		if rep := r.Report; rep == nil || rep.Status != spec.StatusCompleted || rep.Metrics.Iterations != 3 {
			t.Fatalf("report %+v", rep)
		}
		ns, _ := h.db.ListNotifications(h.ctx, u.ID, 0, 10)
		if len(ns) != 1 || ns[0].ActionURL != "/runs/"+r.ID || ns[0].Kind != "run_completed" {
			t.Fatalf("notifications %+v", ns)
		}
		var data map[string]any
		json.Unmarshal(ns[0].Data, &data)
		for _, k := range []string{"run_id", "status", "duration_ms", "iterations", "tokens", "cost_usd"} {
			if _, ok := data[k]; !ok {
				t.Errorf("notification data lacks %s: %s", k, ns[0].Data)
			}
		}
	})
}

func TestFalseCompletionIsBlockedAndFedBack(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("a@example.com")
	r := h.create(u, spec.Config{
		Completion: spec.Completion{Checks: []spec.CheckSpec{{Type: spec.CheckDocumentExists, Path: "report.md"}}},
		Script: script(
			done("claims done too early"),
			scripted.Step{Summary: "writes the report", Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"report.md written"}},
				Docs: []scripted.Doc{{Path: "report.md", Content: "# Report"}}},
		)})
	r = h.waitStatus(u, r.ID, spec.StatusCompleted)
	if r.Metrics.FalseCompletionsBlocked != 1 || r.Metrics.Iterations != 2 {
		t.Fatalf("metrics %+v", r.Metrics)
	}
	its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
	var g spec.GateRecord
	json.Unmarshal(its[0].Gate, &g)
	if g.Decision.Decision != spec.DecisionContinue || !g.FalseCompletion || !strings.Contains(strings.Join(g.Reasons, " "), "report.md") {
		t.Fatalf("first gate %+v", g)
	}
	if !strings.Contains(its[1].Summary, "saw 1 failing checks") {
		t.Fatalf("the next iteration did not see the failing check: %q", its[1].Summary)
	}
	h.checkMetricsAddUp(u, r.ID)
	evs := h.events(u, r.ID)
	if countType(evs, "check_result") != 2 {
		t.Fatalf("check_result events: %d", countType(evs, "check_result"))
	}
}

func TestWaitRespondContinuesWithTheAnswer(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("a@example.com")
	r := h.create(u, spec.Config{Script: script(
		scripted.Step{Summary: "asks", Status: &spec.Status{NeedsUserInput: true, BlockingQuestions: []string{"Which database?"}}},
		done("answered"),
	)})
	r = h.waitStatus(u, r.ID, spec.StatusWaiting)
	if r.Waiting == nil || r.Waiting.Reason != "needs_input" || r.Waiting.Questions[0] != "Which database?" {
		t.Fatalf("waiting = %+v", r.Waiting)
	}
	if _, err := h.e.Continue(h.ctx, u.ID, r.ID, nil); spec.ErrorCode(err) != spec.ECONFLICT {
		t.Fatalf("continue on a waiting run: %v", err)
	}
	if _, err := h.e.Respond(h.ctx, u.ID, r.ID, []string{"  "}); spec.ErrorCode(err) != spec.EINVALID {
		t.Fatalf("empty answer: %v", err)
	}
	if _, err := h.e.Respond(h.ctx, u.ID, r.ID, []string{"SQLite"}); err != nil {
		t.Fatal(err)
	}
	r = h.waitStatus(u, r.ID, spec.StatusCompleted)
	its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
	if len(its) != 2 || !strings.Contains(its[1].Summary, "answer: SQLite") {
		t.Fatalf("the answer did not reach the next iteration: %+v", its[len(its)-1].Summary)
	}
	if _, err := h.e.Respond(h.ctx, u.ID, r.ID, []string{"again"}); spec.ErrorCode(err) != spec.ECONFLICT {
		t.Fatalf("respond to a completed run: %v", err)
	}
	ns, _ := h.db.ListNotifications(h.ctx, u.ID, 0, 10)
	if len(ns) != 2 || ns[1].Kind != "run_waiting_on_user" {
		t.Fatalf("notifications %+v", ns)
	}
}

func TestInteractiveModeWaitsAfterEachTurnAndMessagesReachTheNext(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("a@example.com")
	r := h.create(u, spec.Config{Mode: spec.ModeInteractive, Script: script(work("turn 1"), done("turn 2"))})
	r = h.waitStatus(u, r.ID, spec.StatusWaiting)
	if r.Waiting.Reason != "turn_ended" {
		t.Fatalf("waiting %+v", r.Waiting)
	}
	if _, err := h.e.Message(h.ctx, u.ID, r.ID, "also check the docs"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Respond(h.ctx, u.ID, r.ID, []string{"go on"}); err != nil {
		t.Fatal(err)
	}
	r = h.waitStatus(u, r.ID, spec.StatusCompleted)
	its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
	if s := its[1].Summary; !strings.Contains(s, "message: also check the docs") || !strings.Contains(s, "answer: go on") {
		t.Fatalf("inbox not seen: %q", s)
	}
}

func TestCancelDuringASlowIterationReturnsPromptly(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("a@example.com")
	r := h.create(u, spec.Config{Script: script(scripted.Step{SleepMS: 60_000})})
	h.waitFor(u, r.ID, "iteration started", func(r *spec.Run) bool { return r.LeaseOwner != "" })
	if _, err := h.e.Cancel(h.ctx, u.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	// The iteration sleeps a minute, three times waitFor's deadline: it is
	// recorded in time only if the cancel interrupted it.
	r = h.waitFor(u, r.ID, "iteration recorded", func(r *spec.Run) bool {
		its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
		return r.Status == spec.StatusCanceled && len(its) == 1 && its[0].Status != spec.IterRunning
	})
	its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
	if len(its) != 1 || its[0].Status != spec.IterCanceled {
		t.Fatalf("iterations %+v", its)
	}
	if _, err := h.e.Cancel(h.ctx, u.ID, r.ID); spec.ErrorCode(err) != spec.ECONFLICT {
		t.Fatalf("second cancel: %v", err)
	}
	if _, err := h.e.Continue(h.ctx, u.ID, r.ID, nil); spec.ErrorCode(err) != spec.ECONFLICT {
		t.Fatalf("continue a canceled run: %v", err)
	}
	evs := h.events(u, r.ID)
	if countType(evs, "run_canceled") != 1 || countType(evs, "iteration_started") != 1 {
		t.Fatalf("events: %d canceled, %d started", countType(evs, "run_canceled"), countType(evs, "iteration_started"))
	}
	h.checkMetricsAddUp(u, r.ID)
}

func TestBudgetStopAndContinueCarryCountersOver(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		u := h.user("a@example.com")
		r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxIterations: 2}, Script: script(
			scripted.Step{Summary: "1", Status: &spec.Status{}, LLM: []spec.LLMCall{{Model: "m", PromptTokens: 10, CostUSD: 0.1, Priced: true}}},
			scripted.Step{Summary: "2", Status: &spec.Status{}, LLM: []spec.LLMCall{{Model: "m", PromptTokens: 10, CostUSD: 0.1, Priced: true}}},
			scripted.Step{Summary: "3", Status: &spec.Status{}, LLM: []spec.LLMCall{{Model: "m", PromptTokens: 10, CostUSD: 0.1, Priced: true}}},
			done("4"),
		)})
		r = h.waitStatus(u, r.ID, spec.StatusStopped)
		if r.StopReason.Type != spec.StopMaxIterations || r.Metrics.Iterations != 2 {
			t.Fatalf("stop %+v metrics %+v", r.StopReason, r.Metrics)
		}
		if _, err := h.e.Continue(h.ctx, u.ID, r.ID, nil); spec.ErrorCode(err) != spec.EINVALID || spec.ErrorField(err) != "budgets.max_iterations" {
			t.Fatalf("continue without raising the exhausted budget: %v", err)
		}
		if _, err := h.e.Continue(h.ctx, u.ID, r.ID, &spec.Budgets{MaxIterations: 10}); err != nil {
			t.Fatal(err)
		}
		r = h.waitStatus(u, r.ID, spec.StatusCompleted)
		if r.Metrics.Iterations != 4 || r.Metrics.TokensTotal != 30 || !closeEnough(r.Metrics.CostTotalUSD, 0.3) {
			t.Fatalf("counters did not carry over: %+v", r.Metrics)
		}
		h.checkMetricsAddUp(u, r.ID)
	})
}

func TestCostAndTokenBudgetsStop(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		u := h.user("a@example.com")
		step := scripted.Step{Status: &spec.Status{}, LLM: []spec.LLMCall{{Model: "m", PromptTokens: 600, CompletionTokens: 400, CostUSD: 0.4, Priced: true}}}
		// Without a forecast (on_forecast off) the budgets stop the run once
		// passed: the backstop.
		cost := h.create(u, spec.Config{Budgets: spec.Budgets{MaxCostUSD: 1, OnForecast: spec.ForecastOff}, Script: script(step)})
		tokens := h.create(u, spec.Config{Budgets: spec.Budgets{MaxTotalTokens: 1500, OnForecast: spec.ForecastOff}, Script: script(step)})
		tools := h.create(u, spec.Config{Budgets: spec.Budgets{MaxToolCalls: 5}, Script: script(scripted.Step{Status: &spec.Status{}, Tools: 3})})
		if r := h.waitStatus(u, cost.ID, spec.StatusStopped); r.StopReason.Type != spec.StopBudgetCost || r.Metrics.Iterations != 3 {
			t.Fatalf("cost: %+v %+v", r.StopReason, r.Metrics)
		}
		if r := h.waitStatus(u, tokens.ID, spec.StatusStopped); r.StopReason.Type != spec.StopBudgetTokens || r.Metrics.Iterations != 2 {
			t.Fatalf("tokens: %+v %+v", r.StopReason, r.Metrics)
		}
		if r := h.waitStatus(u, tools.ID, spec.StatusStopped); r.StopReason.Type != spec.StopBudgetToolCalls || r.Metrics.Iterations != 2 {
			t.Fatalf("tools: %+v %+v", r.StopReason, r.Metrics)
		}
	})
}

func TestBreakersStopRunsWithEvidence(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("a@example.com")
	stall := h.create(u, spec.Config{Script: script(scripted.Step{Summary: "same", Progress: "p", Status: &spec.Status{}})})
	errs := h.create(u, spec.Config{Breakers: spec.Breakers{RepeatedError: 2}, Script: script(scripted.Step{Fail: "connection refused to 10.0.0.1:5432 after 3012ms"})})
	panics := h.create(u, spec.Config{Breakers: spec.Breakers{RepeatedError: 2}, Script: script(scripted.Step{Panic: "nil map"})})
	r := h.waitStatus(u, stall.ID, spec.StatusStopped)
	if r.StopReason.Type != spec.StopNoProgress || r.Metrics.Iterations != 3 {
		t.Fatalf("stall: %+v", r.StopReason)
	}
	var ev spec.Evidence
	if err := json.Unmarshal(r.StopReason.Evidence, &ev); err != nil || len(ev.Fingerprints) != 3 || len(ev.LastSummaries) == 0 {
		t.Fatalf("evidence %s: %v", r.StopReason.Evidence, err)
	}
	if countType(h.events(u, r.ID), "run_stalled") != 1 {
		t.Fatalf("no run_stalled event")
	}
	r = h.waitStatus(u, errs.ID, spec.StatusStopped)
	if r.StopReason.Type != spec.StopRepeatedError {
		t.Fatalf("errors: %+v", r.StopReason)
	}
	r = h.waitStatus(u, panics.ID, spec.StatusStopped)
	its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
	if r.StopReason.Type != spec.StopRepeatedError || its[0].Status != spec.IterFailed || !strings.Contains(its[0].Error, "panicked") {
		t.Fatalf("panics: %+v %+v", r.StopReason, its[0])
	}
	// Continue after a breaker trip gets a fresh window.
	if _, err := h.e.Continue(h.ctx, u.ID, stall.ID, nil); err != nil {
		t.Fatal(err)
	}
	r = h.waitFor(u, stall.ID, "stopped again", func(r *spec.Run) bool { return r.Status == spec.StatusStopped && r.Metrics.Iterations > 3 })
	if r.Metrics.Iterations != 6 {
		t.Fatalf("after continue the breaker should allow a fresh window of 3; iterations = %d", r.Metrics.Iterations)
	}
}

func TestFatalErrorStopsTheRun(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("a@example.com")
	r := h.create(u, spec.Config{Script: script(scripted.Step{Fatal: &spec.Fatal{Type: "error", Detail: "The model endpoint refused the API key (401)."}})})
	r = h.waitStatus(u, r.ID, spec.StatusStopped)
	if r.StopReason.Type != spec.StopError || !strings.Contains(r.StopReason.Detail, "API key") || r.Metrics.Iterations != 1 {
		t.Fatalf("%+v", r.StopReason)
	}
}

func TestPerUserConcurrencyLimitAndFairness(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxConcurrentPerUser = 2 })
	a, b := h.user("a@example.com"), h.user("b@example.com")
	slow := script(scripted.Step{SleepMS: 150, Status: &spec.Status{}}, scripted.Step{SleepMS: 150, Status: &spec.Status{}}, done("3"))
	var runsA, runsB []*spec.Run
	for i := 0; i < 5; i++ {
		runsA = append(runsA, h.create(a, spec.Config{Objective: fmt.Sprint("a", i), Script: slow}))
	}
	for i := 0; i < 2; i++ {
		runsB = append(runsB, h.create(b, spec.Config{Objective: fmt.Sprint("b", i), Script: slow}))
	}
	if runsA[2].Status != spec.StatusQueued || runsA[1].Status != spec.StatusRunning || runsB[1].Status != spec.StatusRunning {
		t.Fatalf("statuses at creation: %s %s %s", runsA[1].Status, runsA[2].Status, runsB[1].Status)
	}
	// Watch the limit hold while everything runs to completion.
	var mu sync.Mutex
	maxRunning := map[int64]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, u := range []*spec.User{a, b} {
				c, _ := h.db.CountRunsByStatus(h.ctx, u.ID)
				mu.Lock()
				maxRunning[u.ID] = max(maxRunning[u.ID], c[spec.StatusRunning])
				mu.Unlock()
			}
		}
	}()
	for _, r := range runsB {
		h.waitStatus(b, r.ID, spec.StatusCompleted)
	}
	for _, r := range runsA {
		h.waitStatus(a, r.ID, spec.StatusCompleted)
	}
	close(stop)
	wg.Wait()
	if maxRunning[a.ID] > 2 || maxRunning[b.ID] > 2 {
		t.Fatalf("limit exceeded: %v", maxRunning)
	}
	// FIFO: a's queued runs started in creation order.
	var starts []time.Time
	for _, r := range runsA {
		got, _ := h.db.FindRun(h.ctx, a.ID, r.ID)
		starts = append(starts, got.StartedAt)
	}
	for i := 1; i < len(starts); i++ {
		if starts[i].Before(starts[i-1]) {
			t.Fatalf("queued runs did not start FIFO: %v", starts)
		}
	}
}

func TestWaitingAndStoppedRunsHoldNoSlot(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxConcurrentPerUser = 1 })
	u := h.user("a@example.com")
	// The first run holds the only slot while it works (half a second), so
	// the second queues; once the first waits, the second runs.
	waiting := h.create(u, spec.Config{Script: script(scripted.Step{SleepMS: 500, Status: &spec.Status{NeedsUserInput: true, BlockingQuestions: []string{"?"}}})})
	second := h.create(u, spec.Config{Script: script(done("x"))})
	if second.Status != spec.StatusQueued {
		t.Fatalf("second = %s", second.Status)
	}
	h.waitStatus(u, waiting.ID, spec.StatusWaiting)
	h.waitStatus(u, second.ID, spec.StatusCompleted)
}

func TestTransitionsAreRefusedClearly(t *testing.T) {
	h := newHarness(t, nil)
	u, other := h.user("a@example.com"), h.user("b@example.com")
	r := h.create(u, spec.Config{Script: script(done("x"))})
	h.waitStatus(u, r.ID, spec.StatusCompleted)
	cases := []struct {
		name string
		err  error
		code string
	}{
		{"continue a completed run", errOf(h.e.Continue(h.ctx, u.ID, r.ID, nil)), spec.ECONFLICT},
		{"respond to a completed run", errOf(h.e.Respond(h.ctx, u.ID, r.ID, []string{"x"})), spec.ECONFLICT},
		{"message a completed run", errOf(h.e.Message(h.ctx, u.ID, r.ID, "x")), spec.ECONFLICT},
		{"cancel a completed run", errOf(h.e.Cancel(h.ctx, u.ID, r.ID)), spec.ECONFLICT},
		{"cancel another user's run", errOf(h.e.Cancel(h.ctx, other.ID, r.ID)), spec.ENOTFOUND},
		{"respond to another user's run", errOf(h.e.Respond(h.ctx, other.ID, r.ID, []string{"x"})), spec.ENOTFOUND},
		{"cancel an unknown run", errOf(h.e.Cancel(h.ctx, u.ID, "nope")), spec.ENOTFOUND},
	}
	for _, c := range cases {
		if spec.ErrorCode(c.err) != c.code {
			t.Errorf("%s: got %v, want code %s", c.name, c.err, c.code)
		}
	}
	running := h.create(u, spec.Config{Script: script(scripted.Step{SleepMS: 30_000})})
	if _, err := h.e.Respond(h.ctx, u.ID, running.ID, []string{"x"}); spec.ErrorCode(err) != spec.ECONFLICT {
		t.Errorf("respond to a running run: %v", err)
	}
	if _, err := h.e.Message(h.ctx, u.ID, running.ID, "hello"); err != nil {
		t.Errorf("message a running run: %v", err)
	}
	if _, err := h.e.Cancel(h.ctx, u.ID, running.ID); err != nil {
		t.Fatal(err)
	}
}

func errOf(_ *spec.Run, err error) error { return err }

func TestCreateRunValidation(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("a@example.com")
	ok := script(done("x"))
	cases := []struct {
		name  string
		cfg   spec.Config
		field string
	}{
		{"empty objective", spec.Config{Objective: " ", Executor: "script", Script: ok}, "objective"},
		{"huge objective", spec.Config{Objective: strings.Repeat("x", 20001), Executor: "script", Script: ok}, "objective"},
		{"objective with a NUL", spec.Config{Objective: "a\x00b", Executor: "script", Script: ok}, "objective"},
		{"unknown mode", spec.Config{Objective: "x", Mode: "turbo", Executor: "script", Script: ok}, "mode"},
		{"unknown executor", spec.Config{Objective: "x", Executor: "magic"}, "executor"},
		{"llm not configured", spec.Config{Objective: "x", Executor: "llm"}, "executor"},
		{"negative budget", spec.Config{Objective: "x", Executor: "script", Script: ok, Budgets: spec.Budgets{MaxIterations: -1}}, "budgets.max_iterations"},
		{"budget over the server maximum", spec.Config{Objective: "x", Executor: "script", Script: ok, Budgets: spec.Budgets{MaxCostUSD: 1e9}}, "budgets.max_cost_usd"},
		{"bad write mode", spec.Config{Objective: "x", Executor: "script", Script: ok, Permissions: spec.Permissions{WriteMode: "yolo"}}, "permissions.write_mode"},
		{"bad check type", spec.Config{Objective: "x", Executor: "script", Script: ok, Completion: spec.Completion{Checks: []spec.CheckSpec{{Type: "vibes"}}}}, "completion.checks[0].type"},
		{"bad regex", spec.Config{Objective: "x", Executor: "script", Script: ok, Completion: spec.Completion{Checks: []spec.CheckSpec{{Type: "content_pattern", Pattern: "(", Target: "output"}}}}, "completion.checks[0].pattern"},
		{"unknown parent", spec.Config{Objective: "x", Executor: "script", Script: ok, ParentRunID: "nope"}, "parent_run_id"},
		{"breaker out of range", spec.Config{Objective: "x", Executor: "script", Script: ok, Breakers: spec.Breakers{NoProgress: -2}}, "breakers.no_progress"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.e.CreateRun(h.ctx, u, c.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if spec.ErrorField(err) != c.field {
				t.Fatalf("field = %q (%v), want %q", spec.ErrorField(err), err, c.field)
			}
		})
	}
	n, _ := h.db.CountRunsByStatus(h.ctx, u.ID)
	if len(n) != 0 {
		t.Fatalf("refused runs were stored: %v", n)
	}
}

func TestBusDropsASlowSubscriberWithoutBlocking(t *testing.T) {
	bus := NewBus()
	slow := bus.SubscribeRun("r", 2)
	fast := bus.SubscribeRun("r", 100)
	for i := 1; i <= 10; i++ {
		bus.Publish([]*spec.Event{{RunID: "r", Seq: int64(i)}})
	}
	n := 0
	for range slow.C {
		n++
	}
	if !slow.Dropped() || n != 2 {
		t.Fatalf("slow subscriber: dropped=%v got %d", slow.Dropped(), n)
	}
	if len(fast.C) != 10 || fast.Dropped() {
		t.Fatalf("fast subscriber got %d", len(fast.C))
	}
	fast.Close()
	fast.Close()
	if bus.Subscribers() != 0 {
		t.Fatalf("subscribers = %d", bus.Subscribers())
	}
}

func TestShutdownLeavesInFlightRunsRecoverable(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, func(o *Options) { o.ShutdownGrace = 200 * time.Millisecond })
		u := h.user("a@example.com")
		r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxIterations: 2}, Script: script(
			scripted.Step{SleepFirstMS: 60_000, Status: &spec.Status{RemainingWork: []string{"more"}}},
			scripted.Step{Status: &spec.Status{RemainingWork: []string{"more"}}})})
		h.waitFor(u, r.ID, "leased", func(r *spec.Run) bool { return r.LeaseOwner != "" })
		// The first iteration sleeps a minute; Stop must cancel it after the
		// grace period, long before this bound, or it returns the bound's error.
		stopCtx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		defer cancel()
		if err := h.e.Stop(stopCtx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		got, _ := h.db.FindRun(h.ctx, u.ID, r.ID)
		if got.Status != spec.StatusRunning || got.LeaseOwner == "" {
			t.Fatalf("after shutdown the run should stay running with its lease: %s %q", got.Status, got.LeaseOwner)
		}
		// A new engine on the same database recovers it: at start on SQLite
		// (the only process), on PostgreSQL as soon as it sees the stopped
		// process's liveness gone.
		e2 := h.successor(store)
		if store == sqliteStore {
			n, err := e2.recoverAtStart(h.ctx)
			if err != nil || n != 1 {
				t.Fatalf("recovered %d: %v", n, err)
			}
			got, _ = h.db.FindRun(h.ctx, u.ID, r.ID)
			if got.Attempt != 2 {
				t.Fatalf("attempt = %d", got.Attempt)
			}
			its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
			if its[0].Status != spec.IterInterrupted {
				t.Fatalf("iteration status %s", its[0].Status)
			}
		}
		// Started, it works the recovered attempt and counts the interrupted
		// iteration once against the budget: two iterations, then the stop.
		if err := e2.Start(h.ctx); err != nil {
			t.Fatal(err)
		}
		got = h.waitStatus(u, r.ID, spec.StatusStopped)
		if got.StopReason.Type != spec.StopMaxIterations || got.Metrics.Iterations != 2 || got.Attempt < 1 {
			t.Fatalf("after recovery: %+v, %d iterations", got.StopReason, got.Metrics.Iterations)
		}
		if its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID); len(its) != 2 || countType(h.events(u, r.ID), spec.EventRunRecovered) != 1 {
			t.Fatalf("after recovery: %d iterations, events %v", len(its), h.events(u, r.ID))
		}
		h.checkMetricsAddUp(u, r.ID)
		h.events(u, r.ID)
	})
}

// TestAnsweringARunWaitsForTheUsersSlotLock: on a store several processes
// share, a run that an answer resumes counts the user's running runs
// holding the user's slot lock, as a promotion does; while another
// transaction holds it (a promotion in another process), the answer waits
// for it, so that the two cannot both take the user's last slot.
func TestAnsweringARunWaitsForTheUsersSlotLock(t *testing.T) {
	h := newHarnessOn(t, postgresStore, func(o *Options) { o.MaxConcurrentPerUser = 1 })
	u := h.user("a@example.com")
	r := h.create(u, spec.Config{Script: script(scripted.Step{Status: &spec.Status{NeedsUserInput: true, BlockingQuestions: []string{"?"}}}, done("x"))})
	h.waitStatus(u, r.ID, spec.StatusWaiting)

	held := h.holdTx(t, func(tx spec.Tx) error {
		_, err := tx.LockedRunningCount(h.ctx, u.ID)
		return err
	}, nil)
	answered := make(chan error, 1)
	go func() {
		_, err := h.e.Respond(h.ctx, u.ID, r.ID, []string{"yes"})
		answered <- err
	}()
	held.waitBlocking(t, answered, "the answer resumed the run while another transaction held the user's slot lock")
	held.release()
	if err := <-held.done; err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	h.waitStatus(u, r.ID, spec.StatusCompleted)
}

// TestARunStartedOnAFreeSlotTakenBeforeItsCommitIsCreatedQueued: on a
// store several processes share, a run's creation that found a free slot
// starts the run and checks the slot again in its commit, under the user's
// slot lock. When another process took the slot meanwhile (a promotion
// whose transaction held the lock while the creation's commit waited for
// it), the creation's transaction fails and nothing of it stays; the run is
// created again, queued, once.
func TestARunStartedOnAFreeSlotTakenBeforeItsCommitIsCreatedQueued(t *testing.T) {
	h := newHarnessOn(t, postgresStore, func(o *Options) { o.MaxConcurrentPerUser = 1 })
	u := h.user("a@example.com")
	// Another process's promotion: it holds the user's slot lock and then
	// starts a run of its own, taking the only slot.
	other := &spec.Run{ID: "other", UserID: u.ID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
		Config: json.RawMessage(`{}`), Status: spec.StatusRunning}
	held := h.holdTx(t, func(tx spec.Tx) error {
		_, err := tx.LockedRunningCount(h.ctx, u.ID)
		return err
	}, func(tx spec.Tx) error { return tx.InsertRun(h.ctx, other) })

	var mine *spec.Run
	created := make(chan error, 1)
	go func() {
		var err error
		mine, err = h.e.CreateRun(h.ctx, u, spec.Config{Objective: "mine", Executor: spec.ExecutorScript, Script: script(done("x"))})
		created <- err
	}()
	held.waitBlocking(t, created, "the creation committed while another process's promotion held the user's slot lock")
	// It waits in its commit, its work done (its first iteration's job is
	// inserted): it did not hold the lock through that work.
	var inserted bool
	if err := h.db.(*pg.DB).Pool().QueryRow(h.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE c.relname = 'river_job' AND l.granted AND $1::int4 = ANY(pg_blocking_pids(l.pid)))`, held.backend).Scan(&inserted); err != nil {
		t.Fatal(err)
	}
	if !inserted {
		t.Fatal("the creation waited for the user's slot lock before it inserted its run's first job")
	}
	held.release()
	if err := <-held.done; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-created:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the creation did not end once the slot lock was let go")
	}
	if mine.Status != spec.StatusQueued {
		t.Fatalf("the run whose slot was taken before its commit is %s, want queued", mine.Status)
	}
	counts, err := h.db.CountRunsByStatus(h.ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if counts[spec.StatusRunning] != 1 || counts[spec.StatusQueued] != 1 {
		t.Fatalf("runs by status %v, want the other running and this one queued", counts)
	}
	var types []spec.EventType
	for _, e := range h.events(u, mine.ID) {
		types = append(types, e.Type)
	}
	if !slices.Equal(types, []spec.EventType{spec.EventRunCreated}) {
		t.Fatalf("the run's events %v, want its creation once", types)
	}
}

// TestConcurrentCreationsNeverExceedTheUsersSlots: on a store several
// processes share, creations that all find a slot free (none holds the
// slot lock until its commit) start no more runs than the user has slots;
// the others are queued, each once, and start as slots free.
func TestConcurrentCreationsNeverExceedTheUsersSlots(t *testing.T) {
	h := newHarnessOn(t, postgresStore, func(o *Options) { o.MaxConcurrentPerUser = 2 })
	u := h.user("a@example.com")
	const n = 12
	type result struct {
		r   *spec.Run
		err error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			r, err := h.e.CreateRun(h.ctx, u, spec.Config{Objective: fmt.Sprint("run ", i), Executor: spec.ExecutorScript,
				Script: script(scripted.Step{SleepMS: 60_000})})
			results <- result{r, err}
		}()
	}
	started := 0
	for range n {
		select {
		case res := <-results:
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.r.Status == spec.StatusRunning {
				started++
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a creation did not end")
		}
	}
	counts, err := h.db.CountRunsByStatus(h.ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if counts[spec.StatusRunning] != 2 || counts[spec.StatusQueued] != n-2 || started != 2 {
		t.Fatalf("runs by status %v (%d created running), want 2 running and %d queued", counts, started, n-2)
	}
}

// TestAPromotionDoesNotStartARunCanceledMeanwhile: on a store several
// processes share, a promotion that finds a queued run while another
// transaction (a cancel in another process) holds it waits for that
// transaction, and does not start the run it canceled.
func TestAPromotionDoesNotStartARunCanceledMeanwhile(t *testing.T) {
	h := newHarnessOn(t, postgresStore, func(o *Options) { o.MaxConcurrentPerUser = 1 })
	u := h.user("a@example.com")
	first := h.create(u, spec.Config{Script: script(scripted.Step{SleepMS: 60_000})})
	h.waitStatus(u, first.ID, spec.StatusRunning)
	queued := h.create(u, spec.Config{Script: script(done("x"))})
	if queued.Status != spec.StatusQueued {
		t.Fatalf("second run = %s, want queued", queued.Status)
	}

	// Another process cancels the queued run: its transaction holds it...
	var r *spec.Run
	held := h.holdTx(t, func(tx spec.Tx) (err error) {
		r, err = tx.FindRun(h.ctx, queued.ID)
		return err
	}, func(tx spec.Tx) error {
		r.Status = spec.StatusCanceled
		return tx.UpdateRun(h.ctx, r)
	})
	// ...while canceling the first run frees the slot and promotes.
	promoted := make(chan error, 1)
	go func() {
		_, err := h.e.Cancel(h.ctx, u.ID, first.ID)
		promoted <- err
	}()
	held.waitBlocking(t, promoted, "the promotion did not wait for the transaction holding the queued run")
	held.release()
	if err := <-held.done; err != nil {
		t.Fatal(err)
	}
	if err := <-promoted; err != nil {
		t.Fatal(err)
	}
	got, err := h.db.FindRun(h.ctx, u.ID, queued.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != spec.StatusCanceled {
		t.Fatalf("the run canceled while the promotion waited is %s, want canceled", got.Status)
	}
}

// heldTx is a write transaction on a harness's PostgreSQL store that holds
// what it took until released, standing for another process's.
type heldTx struct {
	h       *harness
	backend int32      // its PostgreSQL backend
	release func()     // lets it go on (then) and end; idempotent
	done    chan error // its result, once it ended
}

// holdTx runs hold in a write transaction and returns once it has, with the
// transaction still open; released, the transaction runs then (when not
// nil) and commits. A test that fails releases it before the store closes.
func (h *harness) holdTx(t *testing.T, hold, then func(tx spec.Tx) error) *heldTx {
	t.Helper()
	x := &heldTx{h: h, done: make(chan error, 1)}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	x.release = func() { once.Do(func() { close(release) }) }
	t.Cleanup(x.release) // before the harness's: cleanups run last first
	go func() {
		x.done <- h.db.WriteTx(h.ctx, func(tx spec.Tx) error {
			if err := hold(tx); err != nil {
				return err
			}
			if err := tx.(*pg.Tx).PG.QueryRow(h.ctx, `SELECT pg_backend_pid()`).Scan(&x.backend); err != nil {
				return err
			}
			close(held)
			<-release
			if then == nil {
				return nil
			}
			return then(tx)
		})
	}()
	select {
	case <-held:
	case err := <-x.done:
		t.Fatalf("the transaction to hold failed: %v", err)
	}
	return x
}

// waitBlocking waits until some backend waits for the held transaction,
// failing with failure when step, the work expected to wait, ends first.
func (x *heldTx) waitBlocking(t *testing.T, step <-chan error, failure string) {
	t.Helper()
	pool := x.h.db.(*pg.DB).Pool()
	for waiting := 0; waiting == 0; {
		if err := pool.QueryRow(x.h.ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE $1::int4 = ANY(pg_blocking_pids(pid))`, x.backend).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-step:
			t.Fatalf("%s (%v)", failure, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
