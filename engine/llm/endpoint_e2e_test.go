package llm_test

import (
	"encoding/json"
	"strings"
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
		engine: func(o *engine.Options) {
			o.EndpointBackoffBase, o.EndpointBackoffMax = 40*time.Millisecond, 400*time.Millisecond
		},
	})
	h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		return llmtest.Reply{Status: 429, Content: "quota exceeded for this minute", Header: map[string]string{"Retry-After-Ms": "60"}}, true
	})
	run := h.create(spec.Config{})
	run = h.waitFor(run.ID, "stopped", func(r *db.Run) bool { return r.Status == db.StatusStopped || db.IsTerminalStatus(r.Status) })
	if run.Status != db.StatusStopped || run.StopReason == nil || run.StopReason.Type != engine.StopRateLimited {
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
