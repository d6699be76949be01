package engine

import (
	"strings"
	"testing"

	"homework/engine/spec"
)

func TestGateDecisions(t *testing.T) {
	llm := func() *spec.Config {
		return &spec.Config{Executor: spec.ExecutorLLM, Mode: spec.ModeAuto}
	}
	cmd := func() *spec.Config {
		return &spec.Config{Executor: spec.ExecutorCommand, Mode: spec.ModeAuto}
	}
	pass := spec.CheckResult{Name: "tests", Type: "command", Passed: true}
	fail := spec.CheckResult{Name: "tests", Type: "command", Passed: false, Message: "exit 1"}
	exit := &spec.Status{ExitSignal: true, CompletionEvidence: []string{"tests pass"}}
	tests := []struct {
		name        string
		cfg         *spec.Config
		res         spec.Result
		checks      []spec.CheckResult
		metrics     spec.Metrics
		want        string
		stop        string
		wait        string
		falseClaim  bool
		reasonMatch string
	}{
		{name: "exit signal with evidence and passing checks completes", cfg: llm(), res: spec.Result{Status: exit}, checks: []spec.CheckResult{pass}, want: spec.DecisionComplete, stop: spec.StopCompleted},
		{name: "exit signal without checks completes", cfg: llm(), res: spec.Result{Status: exit}, want: spec.DecisionComplete},
		{name: "exit signal without evidence continues as a false completion", cfg: llm(), res: spec.Result{Status: &spec.Status{ExitSignal: true}}, want: spec.DecisionContinue, falseClaim: true, reasonMatch: "without evidence"},
		{name: "exit signal with a failing check continues as a false completion", cfg: llm(), res: spec.Result{Status: exit}, checks: []spec.CheckResult{fail}, want: spec.DecisionContinue, falseClaim: true, reasonMatch: `check "tests" failed`},
		{name: "exit signal with an iteration error is refused", cfg: llm(), res: spec.Result{Status: exit, Error: "boom"}, want: spec.DecisionContinue, falseClaim: true},
		{name: "missing completion token is refused", cfg: &spec.Config{Executor: spec.ExecutorLLM, Completion: spec.Completion{Token: "DONE-42"}}, res: spec.Result{Status: exit}, want: spec.DecisionContinue, falseClaim: true, reasonMatch: "DONE-42"},
		{name: "completion token in the output completes", cfg: &spec.Config{Executor: spec.ExecutorLLM, Completion: spec.Completion{Token: "DONE-42"}}, res: spec.Result{Status: exit, Output: "all good DONE-42"}, want: spec.DecisionComplete},
		{name: "promise COMPLETE with passing checks completes", cfg: cmd(), res: spec.Result{Promise: &spec.Promise{Kind: spec.PromiseComplete}, Output: "<promise>COMPLETE</promise>"}, checks: []spec.CheckResult{pass}, want: spec.DecisionComplete},
		{name: "promise COMPLETE with failing check is blocked", cfg: cmd(), res: spec.Result{Promise: &spec.Promise{Kind: spec.PromiseComplete}, Output: "x"}, checks: []spec.CheckResult{fail}, want: spec.DecisionContinue, falseClaim: true},
		{name: "promise BLOCKED waits with reason blocked", cfg: cmd(), res: spec.Result{Promise: &spec.Promise{Kind: spec.PromiseBlocked, Reason: "need DB creds"}}, want: spec.DecisionWait, wait: spec.StopBlocked, reasonMatch: "need DB creds"},
		{name: "needs_user_input waits with the questions", cfg: llm(), res: spec.Result{Status: &spec.Status{NeedsUserInput: true, BlockingQuestions: []string{"Which DB?"}}}, want: spec.DecisionWait, wait: "needs_input"},
		{name: "approve_plan waits for approval", cfg: llm(), res: spec.Result{Status: &spec.Status{}, WaitForApproval: "approve plan.md"}, want: spec.DecisionWait, wait: "approve_plan"},
		{name: "no report_status continues and says so", cfg: llm(), res: spec.Result{}, want: spec.DecisionContinue, reasonMatch: "without report_status"},
		{name: "interactive mode waits after the turn", cfg: &spec.Config{Executor: spec.ExecutorLLM, Mode: spec.ModeInteractive}, res: spec.Result{Status: &spec.Status{}}, want: spec.DecisionWait, wait: "turn_ended"},
		{name: "fatal error stops with its reason", cfg: llm(), res: spec.Result{Fatal: &spec.Fatal{Type: "error", Detail: "invalid API key"}}, want: spec.DecisionStop, stop: spec.StopError, reasonMatch: "invalid API key"},
		{name: "iteration budget stops", cfg: &spec.Config{Executor: spec.ExecutorLLM, Budgets: spec.Budgets{MaxIterations: 3}}, res: spec.Result{Status: &spec.Status{}}, metrics: spec.Metrics{Iterations: 3}, want: spec.DecisionStop, stop: spec.StopMaxIterations},
		{name: "time budget stops", cfg: &spec.Config{Executor: spec.ExecutorLLM, Budgets: spec.Budgets{MaxRunningMS: 1000}}, res: spec.Result{Status: &spec.Status{}}, metrics: spec.Metrics{RunningMS: 1000}, want: spec.DecisionStop, stop: spec.StopBudgetTime},
		{name: "token budget stops", cfg: &spec.Config{Executor: spec.ExecutorLLM, Budgets: spec.Budgets{MaxTotalTokens: 100}}, res: spec.Result{Status: &spec.Status{}}, metrics: spec.Metrics{TokensTotal: 150}, want: spec.DecisionStop, stop: spec.StopBudgetTokens},
		{name: "cost budget stops", cfg: &spec.Config{Executor: spec.ExecutorLLM, Budgets: spec.Budgets{MaxCostUSD: 0.5}}, res: spec.Result{Status: &spec.Status{}}, metrics: spec.Metrics{CostTotalUSD: 0.51}, want: spec.DecisionStop, stop: spec.StopBudgetCost},
		{name: "tool-call budget stops", cfg: &spec.Config{Executor: spec.ExecutorLLM, Budgets: spec.Budgets{MaxToolCalls: 10}}, res: spec.Result{Status: &spec.Status{}}, metrics: spec.Metrics{ToolCallsTotal: 10}, want: spec.DecisionStop, stop: spec.StopBudgetToolCalls},
		{name: "completion wins over an exhausted budget", cfg: &spec.Config{Executor: spec.ExecutorLLM, Budgets: spec.Budgets{MaxIterations: 1}}, res: spec.Result{Status: exit}, metrics: spec.Metrics{Iterations: 1}, want: spec.DecisionComplete},
		{name: "stuck tool loop stops", cfg: llm(), res: spec.Result{Status: &spec.Status{}, Stuck: "same action and observation 4 times"}, want: spec.DecisionStop, stop: spec.StopStuck},
		{name: "work remaining continues", cfg: llm(), res: spec.Result{Status: &spec.Status{RemainingWork: []string{"write report"}}}, want: spec.DecisionContinue, reasonMatch: "write report"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.res
			sig := computeSignals(&res, tt.checks)
			d := decide(gateInput{Config: tt.cfg, Iteration: 1, Result: &res, Checks: tt.checks, Metrics: tt.metrics, Signals: sig})
			if d.Decision != tt.want {
				t.Fatalf("decision = %s (%v), want %s", d.Decision, d.Reasons, tt.want)
			}
			if tt.stop != "" && d.StopReason != tt.stop {
				t.Errorf("stop reason = %q, want %q", d.StopReason, tt.stop)
			}
			if tt.wait != "" && d.WaitReason != tt.wait {
				t.Errorf("wait reason = %q, want %q", d.WaitReason, tt.wait)
			}
			if d.FalseCompletion != tt.falseClaim {
				t.Errorf("false completion = %v, want %v", d.FalseCompletion, tt.falseClaim)
			}
			if len(d.Reasons) == 0 {
				t.Errorf("no reasons given")
			}
			if tt.reasonMatch != "" && !strings.Contains(strings.Join(d.Reasons, "\n"), tt.reasonMatch) {
				t.Errorf("reasons %q do not mention %q", d.Reasons, tt.reasonMatch)
			}
		})
	}
}

func TestBreakers(t *testing.T) {
	tru, fls := true, false
	sig := func(progress, out, diff, failing, errFP string, score float64) spec.Signals {
		return spec.Signals{Progress: progress, OutputHash: out, DiffHash: diff, FailingChecks: failing, ErrorFP: errFP, Score: score, HasChecks: true, Summary: "s-" + progress, Failure: "f-" + failing}
	}
	tests := []struct {
		name    string
		cfg     spec.Config
		current spec.Signals
		history []spec.Signals
		want    string
	}{
		{name: "no progress trips after three identical fingerprints", cfg: spec.Config{Executor: "llm"}, current: sig("a", "", "", "", "", 100), history: []spec.Signals{sig("a", "", "", "", "", 100), sig("a", "", "", "", "", 100)}, want: spec.StopNoProgress},
		{name: "no progress does not trip after two", cfg: spec.Config{Executor: "llm"}, current: sig("a", "", "", "", "", 100), history: []spec.Signals{sig("a", "", "", "", "", 100), sig("b", "", "", "", "", 100)}, want: ""},
		{name: "no progress threshold is per run", cfg: spec.Config{Executor: "llm", Breakers: spec.Breakers{NoProgress: 2}}, current: sig("a", "", "", "", "", 100), history: []spec.Signals{sig("a", "", "", "", "", 100)}, want: spec.StopNoProgress},
		{name: "repeated error trips at five", cfg: spec.Config{Executor: "llm"}, current: sig("1", "", "", "", "e", 100), history: []spec.Signals{sig("2", "", "", "", "e", 100), sig("3", "", "", "", "e", 100), sig("4", "", "", "", "e", 100), sig("5", "", "", "", "e", 100)}, want: spec.StopRepeatedError},
		{name: "repeated error needs the same fingerprint", cfg: spec.Config{Executor: "llm"}, current: sig("1", "", "", "", "e", 100), history: []spec.Signals{sig("2", "", "", "", "x", 100), sig("3", "", "", "", "e", 100), sig("4", "", "", "", "e", 100), sig("5", "", "", "", "e", 100)}, want: ""},
		{name: "quality regression trips on three falling scores", cfg: spec.Config{Executor: "llm"}, current: sig("1", "", "", "", "", 50), history: []spec.Signals{sig("2", "", "", "", "", 70), sig("3", "", "", "", "", 90)}, want: spec.StopQualityRegression},
		{name: "quality regression needs more than ten points", cfg: spec.Config{Executor: "llm"}, current: sig("1", "", "", "", "", 85), history: []spec.Signals{sig("2", "", "", "", "", 88), sig("3", "", "", "", "", 90)}, want: ""},
		{name: "quality regression can be turned off", cfg: spec.Config{Executor: "llm", Breakers: spec.Breakers{QualityRegression: &fls}}, current: sig("1", "", "", "", "", 50), history: []spec.Signals{sig("2", "", "", "", "", 70), sig("3", "", "", "", "", 90)}, want: ""},
		{name: "quality regression explicitly on", cfg: spec.Config{Executor: "llm", Breakers: spec.Breakers{QualityRegression: &tru}}, current: sig("1", "", "", "", "", 50), history: []spec.Signals{sig("2", "", "", "", "", 70), sig("3", "", "", "", "", 90)}, want: spec.StopQualityRegression},
		{name: "command stall on output hash", cfg: spec.Config{Executor: "command"}, current: sig("1", "o", "d1", "", "", 100), history: []spec.Signals{sig("2", "o", "d2", "", "", 100), sig("3", "o", "d3", "", "", 100)}, want: spec.StopNoProgress},
		{name: "command stall on diff hash", cfg: spec.Config{Executor: "command"}, current: sig("1", "o1", "d", "", "", 100), history: []spec.Signals{sig("2", "o2", "d", "", "", 100), sig("3", "o3", "d", "", "", 100)}, want: spec.StopNoProgress},
		{name: "command stall on the failing-check set", cfg: spec.Config{Executor: "command"}, current: sig("1", "o1", "d1", "f", "", 0), history: []spec.Signals{sig("2", "o2", "d2", "f", "", 0), sig("3", "o3", "d3", "f", "", 0)}, want: spec.StopNoProgress},
		{name: "command run changing every time does not stall", cfg: spec.Config{Executor: "command"}, current: sig("1", "o1", "d1", "f1", "", 0), history: []spec.Signals{sig("2", "o2", "d2", "f2", "", 0), sig("3", "o3", "d3", "f3", "", 0)}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, detail, ev := breakers(gateInput{Config: &tt.cfg, Result: &spec.Result{}, Signals: tt.current, History: tt.history})
			if got != tt.want {
				t.Fatalf("breaker = %q (%s), want %q", got, detail, tt.want)
			}
			if got != "" && (ev == nil || len(ev.LastSummaries) == 0) {
				t.Fatalf("trip without evidence: %+v", ev)
			}
		})
	}
}

func TestOutagesAreNamedByTheirFingerprint(t *testing.T) {
	for fp, want := range map[string]string{
		storeUnavailableFP: spec.StopStoreUnavailable,
		"model:http_503":   spec.StopModelUnavailable,
		"model:http_429":   spec.StopRateLimited,
		"mcp:unavailable:the mcp server test did not start": spec.StopToolUnavailable,
		"tool:mcp__test__echo:unavailable:crashed":          spec.StopToolUnavailable,
		"tool:mcp__test__echo:error:bad input":              "",
		"tool:workspace_write:unavailable:x":                "",
		"model:http_400":                                    "",
	} {
		if got := outageFailure(fp); got != want {
			t.Errorf("outageFailure(%q) = %q, want %q", fp, got, want)
		}
	}
}
