package engine

import (
	"context"
	"time"

	"homework/db"
	"homework/engine/spec"
)

// host is the spec.Host an executor gets for one iteration.
type host struct {
	e         *Engine
	runID     string
	iteration int
	tr        *transcript // nil outside an iteration (the summarizer)
}

func (h *host) Now() time.Time { return h.e.now() }

// Emit appends a non-state event through the group committer.
func (h *host) Emit(ctx context.Context, typ string, data any) error {
	_, err := h.e.db.AppendEvent(ctx, h.runID, typ, data)
	return err
}

// RecordLLMCall stores the call, adds it to the run's live totals and emits
// llm_call and iteration_cost_update, all in one transaction.
func (h *host) RecordLLMCall(ctx context.Context, c spec.LLMCall) error {
	e := h.e
	ctx = context.WithoutCancel(ctx) // spend is recorded even when the iteration is cancelled
	err := e.db.WriteTx(ctx, func(tx *db.Tx) error {
		row := &db.LLMCall{RunID: h.runID, Iteration: h.iteration, Role: c.Role, Model: c.Model,
			PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens, CostUSD: c.CostUSD, Priced: c.Priced,
			LatencyMS: c.LatencyMS, Error: c.Error}
		if err := tx.InsertLLMCall(ctx, row); err != nil {
			return err
		}
		run, err := tx.FindRun(ctx, h.runID)
		if err != nil {
			return err
		}
		run.Metrics.AddCall(c.Model, c.PromptTokens, c.CompletionTokens, c.CostUSD, c.Priced)
		if err := tx.SetRunMetrics(ctx, run); err != nil {
			return err
		}
		iter, err := tx.SumLLMCalls(ctx, h.runID, h.iteration)
		if err != nil {
			return err
		}
		if _, err := tx.AppendEvent(ctx, h.runID, "llm_call", map[string]any{
			"iteration": h.iteration, "role": c.Role, "model": c.Model, "prompt_tokens": c.PromptTokens,
			"completion_tokens": c.CompletionTokens, "cost_usd": c.CostUSD, "priced": c.Priced,
			"latency_ms": c.LatencyMS, "error": c.Error,
		}); err != nil {
			return err
		}
		_, err = tx.AppendEvent(ctx, h.runID, "iteration_cost_update", map[string]any{
			"iteration": h.iteration, "iteration_tokens": iter.TokensTotal, "iteration_cost_usd": iter.CostTotalUSD,
			"tokens_total": run.Metrics.TokensTotal, "cost_total_usd": run.Metrics.CostTotalUSD,
			"unpriced_calls": run.Metrics.UnpricedCalls, "by_model": run.Metrics.ByModel,
		})
		return err
	})
	h.transcribeModelCall(ctx, c)
	if err == nil {
		h.e.metrics.llmTokens.Add(float64(c.PromptTokens + c.CompletionTokens))
		h.e.metrics.llmCost.Add(c.CostUSD)
	}
	return err
}

// RecordLLMCall records a model call made for the run outside an iteration's
// host (the summarizer writing the report), against the run's current
// iteration, updating its live totals.
func (e *Engine) RecordLLMCall(ctx context.Context, run *db.Run, c spec.LLMCall) error {
	h := &host{e: e, runID: run.ID, iteration: max(run.Iteration, 1)}
	return h.RecordLLMCall(ctx, c)
}
