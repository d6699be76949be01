package sqlstore

import (
	"context"
	"homework/engine/spec"
)

// InsertLLMCall stores a call's usage. Nothing reads its id back, so it is
// a held write (execHeld): on PostgreSQL it goes out with the
// transaction's next statement.
func (tx *Tx) InsertLLMCall(ctx context.Context, c *spec.LLMCall) error {
	c.CreatedAt = tx.now
	return tx.execHeld(ctx, -1, nil, "insert model call", `INSERT INTO llm_calls (run_id, iteration, role, model, prompt_tokens, completion_tokens,
		cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, priced, cost_source, table_cost_usd, latency_ms, error, created_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		c.RunID, c.Iteration, c.Role, c.Model, c.PromptTokens, c.CompletionTokens, c.CachedTokens, c.CacheWriteTokens, c.ReasoningTokens,
		c.CostUSD, c.Priced, c.CostSource, c.TableCostUSD, c.LatencyMS, c.Error, tx.now.UnixMilli())
}

// ListLLMCalls returns the user's run's model calls in order.
func (r Reads) ListLLMCalls(ctx context.Context, userID int64, runID string) ([]*spec.LLMCall, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := r.c.Query(ctx, `SELECT id, run_id, iteration, role, model, prompt_tokens, completion_tokens,
		cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, priced, cost_source, table_cost_usd, latency_ms, error, created_at FROM llm_calls WHERE run_id = ? ORDER BY id`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.LLMCall
	for rows.Next() {
		var c spec.LLMCall
		var created int64
		if err := rows.Scan(&c.ID, &c.RunID, &c.Iteration, &c.Role, &c.Model, &c.PromptTokens, &c.CompletionTokens,
			&c.CachedTokens, &c.CacheWriteTokens, &c.ReasoningTokens, &c.CostUSD, &c.Priced, &c.CostSource, &c.TableCostUSD,
			&c.LatencyMS, &c.Error, &created); err != nil {
			return nil, err
		}
		c.CreatedAt = msTime(created)
		out = append(out, &c)
	}
	return out, rows.Err()
}

const sumLLMCallsSQL = `SELECT model, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens,
	cost_usd, priced, cost_source, latency_ms FROM llm_calls
	WHERE run_id = ? AND iteration = ?`

// SumLLMCalls returns the usage of the run's calls made in iteration.
func (tx *Tx) SumLLMCalls(ctx context.Context, runID string, iteration int) (spec.Metrics, error) {
	rows, err := tx.c.Query(ctx, sumLLMCallsSQL, runID, iteration)
	if err != nil {
		return spec.Metrics{}, err
	}
	return sumCalls(rows)
}

// SumLLMCalls returns the usage of the run's calls made in iteration, read
// from the reader pool.
func (r Reads) SumLLMCalls(ctx context.Context, runID string, iteration int) (spec.Metrics, error) {
	rows, err := r.c.Query(ctx, sumLLMCallsSQL, runID, iteration)
	if err != nil {
		return spec.Metrics{}, err
	}
	return sumCalls(rows)
}

func sumCalls(rows Rows) (spec.Metrics, error) {
	defer rows.Close()
	var m spec.Metrics
	for rows.Next() {
		var c spec.LLMCall
		if err := rows.Scan(&c.Model, &c.PromptTokens, &c.CompletionTokens, &c.CachedTokens, &c.CacheWriteTokens,
			&c.ReasoningTokens, &c.CostUSD, &c.Priced, &c.CostSource, &c.LatencyMS); err != nil {
			return spec.Metrics{}, err
		}
		m.AddLLMCall(c)
	}
	return m, rows.Err()
}
