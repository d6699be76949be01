package storetest

import (
	"testing"

	"homework/engine/spec"
)

// llmCalls: a model call's cached, cache-write and reasoning tokens, its
// cost's source and the price table's differing figure round-trip, and an
// iteration's sum attributes each model its own.
func (s laterSuite) llmCalls(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("calls@example.com")
	r := f.run(u.ID, "run-calls")
	opus := spec.LLMCall{RunID: r.ID, Iteration: 1, Role: "agent", Model: "claude-opus-4-5-20251101", PromptTokens: 52003, CompletionTokens: 1500,
		CachedTokens: 40000, CacheWriteTokens: 12000, CostUSD: 0.2, Priced: true, CostSource: spec.CostSourceCLI, TableCostUSD: 0.132515, LatencyMS: 41000}
	haiku := spec.LLMCall{RunID: r.ID, Iteration: 1, Role: "agent", Model: "claude-haiku-4-5-20251001", PromptTokens: 2000, CompletionTokens: 300,
		ReasoningTokens: 120, CostUSD: 0.0035, Priced: true, CostSource: spec.CostSourceTable}
	var sum spec.Metrics
	f.tx(func(tx spec.Tx) error {
		for _, c := range []*spec.LLMCall{&opus, &haiku} {
			if err := tx.InsertLLMCall(f.ctx, c); err != nil {
				return err
			}
		}
		var err error
		sum, err = tx.SumLLMCalls(f.ctx, r.ID, 1)
		return err
	})
	calls, err := ls.ListLLMCalls(f.ctx, u.ID, r.ID)
	if err != nil || len(calls) != 2 {
		t.Fatalf("calls %v, %v", calls, err)
	}
	for i, want := range []spec.LLMCall{opus, haiku} {
		got := *calls[i]
		got.ID, got.CreatedAt, want.ID = 0, want.CreatedAt, 0
		if got != want {
			t.Errorf("call %d read back as %+v, want %+v", i, got, want)
		}
	}
	o, h := sum.ByModel[opus.Model], sum.ByModel[haiku.Model]
	if sum.LLMCalls != 2 || sum.CachedTokens != 40000 || sum.CacheWriteTokens != 12000 || sum.ReasoningTokens != 120 || sum.CostReportedUSD != 0.2 ||
		o.CachedTokens != 40000 || o.CostReportedUSD != 0.2 || h.ReasoningTokens != 120 || h.CostReportedUSD != 0 {
		t.Errorf("the iteration's sum %+v", sum)
	}
}
