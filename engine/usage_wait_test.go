package engine

import (
	"strings"
	"testing"

	"homework/engine/spec"
)

func TestGateWaitsWhenUsageIsUnknown(t *testing.T) {
	cmd := func(b spec.Budgets) *spec.Config { return &spec.Config{Executor: spec.ExecutorCommand, Budgets: b} }
	unknown := spec.Result{UsageUnknown: "iteration 2's output looks like claude-json, not codex-json (agent.output_format), so its tokens and cost could not be read"}
	unpriced := spec.Result{CostUnknown: `iteration 2 used "gpt-9", which has no price`}
	for _, tc := range []struct {
		name string
		cfg  *spec.Config
		res  spec.Result
		want string
		wait string
	}{
		{"unknown usage with a cost budget waits", cmd(spec.Budgets{MaxCostUSD: 1}), unknown, spec.DecisionWait, spec.WaitUsageUnknown},
		{"unknown usage with a token budget waits", cmd(spec.Budgets{MaxTotalTokens: 1000}), unknown, spec.DecisionWait, spec.WaitUsageUnknown},
		{"unknown usage without such budgets goes on", cmd(spec.Budgets{MaxIterations: 5}), unknown, spec.DecisionContinue, ""},
		{"an unpriced model with a cost budget waits", cmd(spec.Budgets{MaxCostUSD: 1}), unpriced, spec.DecisionWait, spec.WaitUsageUnknown},
		{"an unpriced model with only a token budget goes on: its tokens were counted", cmd(spec.Budgets{MaxTotalTokens: 1000}), unpriced, spec.DecisionContinue, ""},
		{"a completed run completes though its last usage is unknown", cmd(spec.Budgets{MaxCostUSD: 1}),
			spec.Result{UsageUnknown: unknown.UsageUnknown, Promise: &spec.Promise{Kind: spec.PromiseComplete}, Output: "done"}, spec.DecisionComplete, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.res
			d := decide(gateInput{Config: tc.cfg, Iteration: 2, Result: &res, Signals: computeSignals(&res, nil)})
			if d.Decision != tc.want || d.WaitReason != tc.wait {
				t.Fatalf("decision %+v, want %s %s", d, tc.want, tc.wait)
			}
			if tc.wait != "" && (len(d.Questions) != 1 || !strings.Contains(d.Questions[0], "iteration 2")) {
				t.Errorf("questions %q do not name the iteration", d.Questions)
			}
		})
	}
	t.Run("an exhausted budget stops rather than waits", func(t *testing.T) {
		res := unknown
		d := decide(gateInput{Config: cmd(spec.Budgets{MaxCostUSD: 1}), Iteration: 2, Result: &res, Metrics: spec.Metrics{CostTotalUSD: 1.2}, Signals: computeSignals(&res, nil)})
		if d.Decision != spec.DecisionStop || d.StopReason != spec.StopBudgetCost {
			t.Errorf("decision %+v", d)
		}
	})
}
