package views

import (
	"math"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

func TestDollars(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "$0.00"}, {0.00321, "$0.00321"}, {0.0123, "$0.0123"}, {0.04, "$0.0400"}, {0.5, "$0.500"},
		{0.123, "$0.123"}, {0.9996, "$1.00"}, {1.234, "$1.23"}, {12.345, "$12.35"}, {0.012, "$0.0120"}, {0.0099999, "$0.0100"},
	} {
		if got := Dollars(tc.v); got != tc.want {
			t.Errorf("Dollars(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestTimelineBars(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0.Add(10 * time.Minute)
	its := []IterationView{
		{Iteration: 1, StartedAt: t0, EndedAt: t0.Add(30 * time.Second)},
		{Iteration: 2, StartedAt: t0, EndedAt: t0.Add(2 * time.Minute), Checks: []spec.CheckResult{{DurationMS: 30_000}}},
		{Iteration: 3, StartedAt: now.Add(-time.Minute)}, // running for a minute
		{Iteration: 4}, // not started
	}
	s := timelineScale(RunView{Run: &spec.Run{Executor: spec.ExecutorLLM}, Iterations: its, Now: now})
	if s.Max != 2*time.Minute {
		t.Fatalf("scale %v, want the longest, 2m", s.Max)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for i, want := range []iterationBar{{Work: 25}, {Work: 75, Checks: 25}, {Work: 50}, {}} {
		if got := s.bar(its[i]); !near(got.Work, want.Work) || !near(got.Checks, want.Checks) {
			t.Errorf("iteration %d: bar %+v, want %+v", i+1, got, want)
		}
	}
	if got := s.title(its[1]); got != "Started 2026-01-02 03:04:05 UTC · took 2m 0s · checks 30.0s · 0 tokens · $0.00" {
		t.Errorf("title %q", got)
	}
	if got := s.title(its[2]); !strings.Contains(got, "took 1m 0s so far") {
		t.Errorf("a running iteration's title %q", got)
	}
	// Model calls are a segment at the start, never longer than what the
	// checks leave; the hover tells their time.
	withModel := IterationView{Iteration: 5, StartedAt: t0, EndedAt: t0.Add(2 * time.Minute),
		Checks:  []spec.CheckResult{{DurationMS: 30_000}},
		Metrics: spec.Metrics{LLMCalls: 3, ModelMS: 60_000}}
	if got := s.bar(withModel); !near(got.Model, 50) || !near(got.Work, 25) || !near(got.Checks, 25) {
		t.Errorf("model calls 1m, checks 30s of 2m: bar %+v", got)
	}
	withModel.Metrics.ModelMS = 10 * 60_000 // more than the iteration's time (calls in parallel)
	if got := s.bar(withModel); !near(got.Model, 75) || !near(got.Work, 0) || !near(got.Checks, 25) {
		t.Errorf("model time past the iteration's: bar %+v", got)
	}
	withModel.Metrics.ModelMS = 60_000
	if got := s.title(withModel); !strings.Contains(got, "3 model calls (1m 0s)") {
		t.Errorf("title with model calls %q", got)
	}
	cmd := timelineScale(RunView{Run: &spec.Run{Executor: spec.ExecutorCommand}, Iterations: its, Now: now})
	if got := cmd.title(its[0]); !strings.HasSuffix(got, "cost not measured") {
		t.Errorf("an unmeasured command run's title %q", got)
	}
}
