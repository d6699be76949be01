package engine

import (
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

func TestEndpointFailureNamesRetryableEndpointErrors(t *testing.T) {
	for fp, want := range map[string]string{
		"model:http_429": spec.StopRateLimited, "model:http_503": spec.StopModelUnavailable, "model:network": spec.StopModelUnavailable,
		"model:timeout": spec.StopModelUnavailable, "model:http_404": "", "model:http_401": "", "tool:x:internal:y": "", "": "",
	} {
		if got := endpointFailure(fp); got != want {
			t.Errorf("endpointFailure(%q) = %q, want %q", fp, got, want)
		}
	}
}

func TestEndpointBackoffGrowsIsCappedAndHonoursRetryAfter(t *testing.T) {
	e := &Engine{opts: Options{EndpointBackoffBase: time.Second, EndpointBackoffMax: 10 * time.Second}}
	failed := &outcome{res: &spec.Result{ErrorFingerprint: "model:http_503"}}
	history := func(n int) []spec.Signals {
		h := make([]spec.Signals, n)
		for i := range h {
			h[i].ErrorFP = "model:http_429"
		}
		return h
	}
	// With ±50% jitter, the n-th consecutive failure waits within
	// [0.5, 1.5] × min(base × 2^(n-1), max), and never past max.
	for n := 1; n <= 8; n++ {
		interval := min(time.Second<<(n-1), 10*time.Second)
		lo, hi := interval/2, min(interval*3/2, 10*time.Second)
		for range 50 {
			d := e.endpointBackoff(failed, history(n-1))
			if d < lo || d > hi {
				t.Fatalf("failure %d: backoff %s outside [%s, %s]", n, d, lo, hi)
			}
		}
	}
	// A success in between starts over.
	mixed := append([]spec.Signals{{ErrorFP: ""}}, history(5)...)
	if d := e.endpointBackoff(failed, mixed); d > 1500*time.Millisecond {
		t.Fatalf("backoff after a success in between: %s", d)
	}
	// Retry-After wins when longer, up to its own bound.
	failed.res.RetryAfter = 40 * time.Second
	if d := e.endpointBackoff(failed, nil); d != 40*time.Second {
		t.Fatalf("Retry-After 40s: backoff %s", d)
	}
	failed.res.RetryAfter = time.Hour
	if d := e.endpointBackoff(failed, nil); d != maxRetryAfter {
		t.Fatalf("Retry-After 1h: backoff %s", d)
	}
	// Not an endpoint failure: no wait.
	if d := e.endpointBackoff(&outcome{res: &spec.Result{ErrorFingerprint: "tool:x:internal:y"}}, history(3)); d != 0 {
		t.Fatalf("backoff %s after a tool error", d)
	}
}

func TestAnOutageIsNamedOverABudgetAndABreaker(t *testing.T) {
	for _, tc := range []struct {
		fp, err, want string
		budgets       spec.Budgets
		breakers      spec.Breakers
	}{
		{"model:http_503", "the model endpoint returned 503: down", spec.StopModelUnavailable, spec.Budgets{MaxIterations: 2}, spec.Breakers{}},
		{"model:http_429", "the model endpoint returned 429: slow down", spec.StopRateLimited, spec.Budgets{MaxCostUSD: 0.001}, spec.Breakers{}},
		{storeUnavailableFP, "the database could not be reached: dial tcp: connection refused", spec.StopStoreUnavailable, spec.Budgets{MaxIterations: 2}, spec.Breakers{}},
		{storeUnavailableFP, "the database could not be reached: dial tcp: connection refused", spec.StopStoreUnavailable, spec.Budgets{}, spec.Breakers{RepeatedError: 2}},
		{"tool:x:internal:y", "a tool failed", spec.StopMaxIterations, spec.Budgets{MaxIterations: 2}, spec.Breakers{}},
	} {
		cfg := &spec.Config{Executor: spec.ExecutorLLM, Budgets: tc.budgets, Breakers: tc.breakers}
		sig := spec.Signals{ErrorFP: tc.fp}
		d := decide(gateInput{Config: cfg, Iteration: 2, Result: &spec.Result{Error: tc.err, ErrorFingerprint: tc.fp},
			Metrics: spec.Metrics{Iterations: 2, CostTotalUSD: 0.002}, Signals: sig, History: []spec.Signals{sig}})
		if d.Decision != spec.DecisionStop || d.StopReason != tc.want {
			t.Errorf("%s: %s %s, want stop %s", tc.fp, d.Decision, d.StopReason, tc.want)
			continue
		}
		if tc.want != spec.StopMaxIterations && !strings.Contains(strings.Join(d.Reasons, "; "), tc.err) {
			t.Errorf("%s: reasons %q do not quote the last error", tc.fp, d.Reasons)
		}
	}
}

// TestAnOutageIsNamedOverACutAndEveryBreaker: the outage also names a stop
// the running-time budget made mid-iteration, and any breaker's; a hang cut
// by the budget is the budget's.
func TestAnOutageIsNamedOverACutAndEveryBreaker(t *testing.T) {
	cfg := &spec.Config{Executor: spec.ExecutorLLM, Budgets: spec.Budgets{MaxRunningMS: 5000}}
	cut := &budgetReason{spec.StopBudgetTime, "max_running_ms", "Used the running-time budget (5s)."}
	for _, tc := range []struct {
		name   string
		res    spec.Result
		cut    *budgetReason
		want   string
		detail []string
	}{
		{"the endpoint's 502 when the time budget cut the iteration", spec.Result{Error: "the model endpoint returned 502: bad gateway", ErrorFingerprint: "model:http_502"},
			cut, spec.StopModelUnavailable, []string{"502: bad gateway", "running-time budget (5s)"}},
		{"a hang the time budget cut is the budget's", spec.Result{Error: "ended early: " + cut.detail, ErrorFingerprint: "budget:budget_time"},
			cut, spec.StopBudgetTime, []string{"running-time budget (5s)"}},
		{"a stuck loop on an unavailable database is the database's", spec.Result{Error: "could not reach the database: EOF", ErrorFingerprint: storeUnavailableFP, Stuck: "same action erroring 3 times"},
			nil, spec.StopStoreUnavailable, []string{"EOF", "stuck"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.res
			d := decide(gateInput{Config: cfg, Iteration: 1, Result: &res, Metrics: spec.Metrics{Iterations: 1},
				Signals: computeSignals(&res, nil), Cut: tc.cut})
			if d.Decision != spec.DecisionStop || d.StopReason != tc.want {
				t.Fatalf("decision %s, stop %q (%v); want stop %q", d.Decision, d.StopReason, d.Reasons, tc.want)
			}
			for _, w := range tc.detail {
				if detail := joinReasons(d.Reasons); !strings.Contains(detail, w) {
					t.Errorf("the detail lacks %q: %q", w, detail)
				}
			}
		})
	}
}
