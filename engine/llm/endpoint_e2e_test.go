package llm_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"homework/db"
	"homework/engine"
	"homework/engine/llm"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// TestA429StormIsNamedBackedOffAndNotSummarized: an endpoint answering every
// call with 429 stops the run as rate_limited with the status and message,
// each next iteration waits out a growing backoff (never shorter than
// Retry-After), and the summarizer is not asked to write against it.
func TestA429StormIsNamedBackedOffAndNotSummarized(t *testing.T) {
	h := newE2E(t, e2eOptions{
		llm: func(o *llm.Options) { o.RetryMax = 1 },
		engine: func(o *engine.Options, _ *db.DB) {
			o.EndpointBackoffBase, o.EndpointBackoffMax = 40*time.Millisecond, 400*time.Millisecond
		},
	})
	h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		return llmtest.Reply{Status: 429, Content: "quota exceeded for this minute", Header: map[string]string{"Retry-After-Ms": "60"}}, true
	})
	run := h.create(spec.Config{})
	run = h.waitFor(run.ID, "stopped", func(r *spec.Run) bool { return r.Status == spec.StatusStopped || spec.IsTerminalStatus(r.Status) })
	if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopRateLimited {
		t.Fatalf("run %s, stop reason %+v; want stopped rate_limited", run.Status, run.StopReason)
	}
	if d := run.StopReason.Detail; !strings.Contains(d, "429") || !strings.Contains(d, "quota exceeded for this minute") {
		t.Fatalf("the stop reason does not name the status and message: %q", d)
	}
	if n := len(requestsOf(h.srv, reqSummarizer)); n != 0 {
		t.Fatalf("the summarizer was called %d times against the failing endpoint", n)
	}
	evs := h.events(run.ID)
	var notBefore []time.Time
	var started []time.Time
	for _, e := range evs {
		var d struct {
			DelayMS   int64     `json:"delay_ms"`
			NotBefore time.Time `json:"not_before"`
		}
		json.Unmarshal(e.Data, &d)
		switch e.Type {
		case "iteration_backoff":
			if d.DelayMS < 60 {
				t.Errorf("backoff %d ms is shorter than the endpoint's Retry-After (60 ms)", d.DelayMS)
			}
			notBefore = append(notBefore, d.NotBefore)
		case "iteration_started":
			started = append(started, e.CreatedAt)
		}
	}
	if len(started) != engine.DefaultNoProgress || len(notBefore) != len(started)-1 {
		t.Fatalf("%d iterations and %d backoffs", len(started), len(notBefore))
	}
	for i, nb := range notBefore {
		if started[i+1].Before(nb.Truncate(time.Millisecond)) {
			t.Errorf("iteration %d started at %s, before its backoff ended at %s", i+2, started[i+1], nb)
		}
	}
	if last := evs[len(evs)-1].Type; last != "run_stopped" {
		t.Fatalf("last event %s", last)
	}
}

// TestBudgetsBindInsideAnIteration: a model that would keep working past
// the run's cost, token or tool-call budget is stopped right after the call
// that used it up, in the same iteration, with the budget named.
func TestBudgetsBindInsideAnIteration(t *testing.T) {
	for _, tc := range []struct {
		name     string
		budgets  spec.Budgets
		stop     string
		requests int // planner requests before the cut
	}{
		// gpt-4o-mini: $0.15 per 1M input tokens; each call reads 1M.
		{"cost", spec.Budgets{MaxCostUSD: 0.40}, spec.StopBudgetCost, 3},
		{"tokens", spec.Budgets{MaxTotalTokens: 2_500_000}, spec.StopBudgetTokens, 3},
		{"tool calls", spec.Budgets{MaxToolCalls: 4}, spec.StopBudgetToolCalls, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newE2E(t, e2eOptions{})
			narrate(h.srv, "The budget ran out.")
			var mu sync.Mutex
			n := 0
			h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
				if roleOf(r) != reqPlanner {
					return llmtest.Reply{}, false
				}
				mu.Lock()
				n++
				i := n
				mu.Unlock()
				reply := tools(call("workspace_write", map[string]any{"path": fmt.Sprintf("notes/%d.md", i), "content": fmt.Sprint("part ", i)}))
				reply.PromptTokens, reply.CompletionTokens = 1_000_000, 10
				return reply, true
			})
			run := h.create(spec.Config{Budgets: tc.budgets})
			run = h.waitFor(run.ID, "stopped", func(r *spec.Run) bool { return r.Status == spec.StatusStopped || spec.IsTerminalStatus(r.Status) })
			if run.StopReason == nil || run.StopReason.Type != tc.stop {
				t.Fatalf("run %s stopped with %+v, want %s", run.Status, run.StopReason, tc.stop)
			}
			if run.Metrics.Iterations != 1 {
				t.Fatalf("%d iterations: the budget did not end the first one", run.Metrics.Iterations)
			}
			if got := len(requestsOf(h.srv, reqPlanner)); got != tc.requests {
				t.Fatalf("%d planner calls, want %d: the iteration went on after its budget was used up", got, tc.requests)
			}
			// Spending budgets are not spent further on a summary; a
			// tool-call budget does not forbid one.
			if n := len(requestsOf(h.srv, reqSummarizer)); (n != 0) != (tc.stop == spec.StopBudgetToolCalls) {
				t.Fatalf("the summarizer was called %d times (stop %s)", n, tc.stop)
			}
			if last := h.events(run.ID); last[len(last)-1].Type != "run_stopped" {
				t.Fatalf("last event %s", last[len(last)-1].Type)
			}
		})
	}
}

// TestACostBudgetOnAnUnpricedModelIsRefused: a cost budget that could never
// bind is refused when the run is created, naming the field and the fix.
func TestACostBudgetOnAnUnpricedModelIsRefused(t *testing.T) {
	h := newE2E(t, e2eOptions{})
	narrate(h.srv, "Done.")
	h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		return status(true, "done", "the note is written"), true
	})
	for _, cfg := range []spec.Config{
		{Model: "o3-pro-preview", Budgets: spec.Budgets{MaxCostUSD: 5}},
		{Model: "gpt-4o-mini", Models: &spec.Models{Summarizer: "my-local-llama"}, Budgets: spec.Budgets{MaxCostUSD: 5}},
	} {
		cfg.Objective, cfg.Executor = "Write a note", spec.ExecutorLLM
		_, err := h.eng.CreateRun(h.ctx, h.user, cfg)
		var de *spec.Error
		if !errors.As(err, &de) || de.Code != spec.EINVALID || de.Field != "budgets.max_cost_usd" || !strings.Contains(de.Message, "price file") {
			t.Fatalf("%+v: err = %v", cfg, err)
		}
	}
	// Priced models, or no cost budget, are fine.
	for _, cfg := range []spec.Config{
		{Model: "o3-pro", Budgets: spec.Budgets{MaxCostUSD: 5}},
		{Model: "my-local-llama"},
	} {
		cfg.Objective, cfg.Executor = "Write a note", spec.ExecutorLLM
		if _, err := h.eng.CreateRun(h.ctx, h.user, cfg); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
}
