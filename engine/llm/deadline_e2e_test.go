package llm_test

import (
	"strings"
	"testing"
	"time"

	"homework/db"
	"homework/engine"
	"homework/engine/llm"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// slack is how far past a bound the engine's recorded times may go: the
// scheduling of a loaded machine, never the seconds a missed deadline costs.
const slack = 10 * time.Second

// hang makes every request of role hang until the caller gives up; it
// reports each arrival on the returned channel.
func hang(srv *llmtest.Server, role string) <-chan struct{} {
	arrived := make(chan struct{}, 16)
	never := make(chan struct{})
	srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if roleOf(r) != role {
			return llmtest.Reply{}, false
		}
		select {
		case arrived <- struct{}{}:
		default:
		}
		return llmtest.Reply{Wait: never}, true
	})
	return arrived
}

// TestAHangingModelStopsTheRunAtItsRunningTimeBudget: a model endpoint that
// never answers, under a running-time budget far shorter than the iteration
// timeout, is cut at the budget, mid-iteration: the run stops as
// budget_time, and the running time it recorded is the budget, not the
// iteration timeout. The summarizer is not asked (it would run past the
// budget).
func TestAHangingModelStopsTheRunAtItsRunningTimeBudget(t *testing.T) {
	const budget = 2 * time.Second
	h := newE2E(t, e2eOptions{engine: func(o *engine.Options, _ *db.DB) { o.NarrateTimeout = time.Hour }})
	narrate(h.srv, "Should not be asked.")
	arrived := hang(h.srv, reqPlanner)
	run := h.create(spec.Config{Budgets: spec.Budgets{MaxRunningMS: budget.Milliseconds(), IterationTimeoutMS: time.Hour.Milliseconds()}})
	<-arrived
	run = h.waitFor(run.ID, "stopped", func(r *spec.Run) bool { return r.Status != spec.StatusRunning && r.Status != spec.StatusQueued })
	if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopBudgetTime {
		t.Fatalf("run %s, stop reason %+v; want stopped budget_time", run.Status, run.StopReason)
	}
	if !strings.Contains(run.StopReason.Detail, "running-time budget") {
		t.Errorf("the stop reason does not name the budget: %q", run.StopReason.Detail)
	}
	m := run.Metrics
	if m.Iterations != 1 || m.RunningMS < budget.Milliseconds() || m.RunningMS > (budget+slack).Milliseconds() {
		t.Fatalf("%d iterations, %d ms running; want 1 iteration cut at the %s budget", m.Iterations, m.RunningMS, budget)
	}
	t.Logf("cut at %d ms of running time under a %s budget", m.RunningMS, budget)
	its := h.iterations(run.ID)
	if len(its) != 1 || its[0].Status != spec.IterFailed || !strings.Contains(its[0].Error, "ended early") {
		t.Fatalf("iterations: %+v", its)
	}
	if took := its[0].EndedAt.Sub(its[0].StartedAt); took > budget+slack {
		t.Errorf("the iteration was recorded as taking %s under a %s budget", took, budget)
	}
	if n := len(requestsOf(h.srv, reqSummarizer)); n != 0 {
		t.Errorf("the summarizer was asked %d times after the budget ran out", n)
	}
	if rep := h.report(run); rep.NarrativeError == "" {
		t.Error("the report does not say why it has no narrative")
	}
	h.checkUsageAddsUp(run.ID)
}

// TestAHangingSummarizerIsCutAtTheIterationDeadline: the summarizer is held
// to the deadline of the run's last iteration (its timeout from its start),
// not to a timeout of its own after it: a summarizer that never answers is
// cut there and the run completes, its report saying why it has no
// narrative.
func TestAHangingSummarizerIsCutAtTheIterationDeadline(t *testing.T) {
	const timeout = 2 * time.Second
	h := newE2E(t, e2eOptions{engine: func(o *engine.Options, _ *db.DB) { o.NarrateTimeout = time.Hour }})
	h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if roleOf(r) != reqPlanner {
			return llmtest.Reply{}, false
		}
		return status(true, "The recommendation is written.", "report.md holds the recommendation"), true
	})
	hang(h.srv, reqSummarizer)
	run := h.create(spec.Config{Budgets: spec.Budgets{IterationTimeoutMS: timeout.Milliseconds()}})
	run = h.waitFor(run.ID, "ended", func(r *spec.Run) bool { return r.Status != spec.StatusRunning && r.Status != spec.StatusQueued })
	if run.Status != spec.StatusCompleted {
		t.Fatalf("run %s (%+v), want completed", run.Status, run.StopReason)
	}
	rep := h.report(run)
	if rep.Summary != "" || !strings.Contains(rep.NarrativeError, "deadline") {
		t.Fatalf("report summary %q, narrative error %q; want none, for the deadline", rep.Summary, rep.NarrativeError)
	}
	var summarizer *spec.LLMCall
	for _, c := range h.calls(run.ID) {
		if c.Role == llm.RoleSummarizer {
			if summarizer != nil {
				t.Fatalf("the summarizer was called twice")
			}
			summarizer = c
		}
	}
	if summarizer == nil || !strings.Contains(summarizer.Error, "deadline") {
		t.Fatalf("the summarizer's call: %+v; want one, failed at the deadline", summarizer)
	}
	t.Logf("the summarizer's call was cut after %d ms under a %s iteration timeout", summarizer.LatencyMS, timeout)
	if summarizer.LatencyMS > (timeout + slack).Milliseconds() {
		t.Errorf("the summarizer's call took %d ms under a %s iteration timeout", summarizer.LatencyMS, timeout)
	}
	its := h.iterations(run.ID)
	if len(its) != 1 || its[0].Metrics.RunningMS > (timeout+slack).Milliseconds() {
		t.Fatalf("iterations: %+v", its)
	}
	h.checkUsageAddsUp(run.ID)
}

// TestAnEndpointOutageNamesTheStopOverTheIterationBudget: an endpoint that
// answers every call with 503 under max_iterations 2 stops the run as
// model_unavailable — the outage, not the budget that ran out with it — with
// the endpoint's last status and message and the budget in the detail.
func TestAnEndpointOutageNamesTheStopOverTheIterationBudget(t *testing.T) {
	h := newE2E(t, e2eOptions{
		llm: func(o *llm.Options) { o.RetryMax = 1 },
		engine: func(o *engine.Options, _ *db.DB) {
			o.EndpointBackoffBase, o.EndpointBackoffMax = 20*time.Millisecond, 100*time.Millisecond
		},
	})
	h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		return llmtest.Error(503, "the upstream model is overloaded"), true
	})
	run := h.create(spec.Config{Budgets: spec.Budgets{MaxIterations: 2}})
	run = h.waitFor(run.ID, "stopped", func(r *spec.Run) bool { return r.Status != spec.StatusRunning && r.Status != spec.StatusQueued })
	if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopModelUnavailable {
		t.Fatalf("run %s, stop reason %+v; want stopped model_unavailable", run.Status, run.StopReason)
	}
	d := run.StopReason.Detail
	for _, want := range []string{"503", "the upstream model is overloaded", "iteration budget (2 of 2)"} {
		if !strings.Contains(d, want) {
			t.Errorf("the stop reason's detail lacks %q: %q", want, d)
		}
	}
	if run.Metrics.Iterations != 2 {
		t.Errorf("%d iterations, want 2", run.Metrics.Iterations)
	}
	if n := len(requestsOf(h.srv, reqSummarizer)); n != 0 {
		t.Errorf("the summarizer was asked %d times against the failing endpoint", n)
	}
	gates := h.eventsOf(run.ID, spec.EventGateDecision)
	if last := gates[len(gates)-1]; last["stop_reason"] != spec.StopModelUnavailable {
		t.Errorf("the last gate decision: %v", last)
	}
}
