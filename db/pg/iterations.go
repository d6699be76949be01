package pg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"homework/engine/spec"
)

const iterCols = `run_id, iteration, attempt, status, started_at, ended_at, summary, gate, checks,
	fingerprint, error, error_fingerprint, metrics, artifacts`

func scanIteration(s pgx.Row) (*spec.Iteration, error) {
	var it spec.Iteration
	var started int64
	var ended *int64
	var gate, checks *string
	var metrics, artifacts string
	if err := s.Scan(&it.RunID, &it.Iteration, &it.Attempt, &it.Status, &started, &ended, &it.Summary, &gate, &checks,
		&it.Fingerprint, &it.Error, &it.ErrorFingerprint, &metrics, &artifacts); err != nil {
		return nil, err
	}
	it.StartedAt, it.EndedAt = fromMS(&started), fromMS(ended)
	if err := json.Unmarshal([]byte(metrics), &it.Metrics); err != nil {
		return nil, fmt.Errorf("iteration metrics: %w", err)
	}
	if err := decodeIterationJSON(&it, deref(gate), deref(checks), artifacts); err != nil {
		return nil, fmt.Errorf("iteration %s/%d: %w", it.RunID, it.Iteration, err)
	}
	return &it, nil
}

// decodeIterationJSON decodes the gate, checks and artifacts columns into
// their typed fields, once, at the store boundary; the raw JSON is kept too.
func decodeIterationJSON(it *spec.Iteration, gate, checks, artifacts string) error {
	if gate != "" && gate != "null" {
		it.Gate = json.RawMessage(gate)
		it.GateRecord = &spec.GateRecord{}
		if err := json.Unmarshal(it.Gate, it.GateRecord); err != nil {
			return fmt.Errorf("gate: %w", err)
		}
	}
	if checks != "" {
		it.Checks = json.RawMessage(checks)
		if err := json.Unmarshal(it.Checks, &it.CheckResults); err != nil {
			return fmt.Errorf("checks: %w", err)
		}
	}
	it.Artifacts = json.RawMessage(artifacts)
	if artifacts != "" {
		if err := json.Unmarshal(it.Artifacts, &it.ArtifactRefs); err != nil {
			return fmt.Errorf("artifacts: %w", err)
		}
	}
	return nil
}

// encodeIterationJSON returns the gate, checks and artifacts columns. Raw
// JSON set by the writer wins; otherwise the typed fields are encoded.
func encodeIterationJSON(it *spec.Iteration) (gate, checks any, artifacts string, err error) {
	enc := func(raw json.RawMessage, typed any, set bool) (any, error) {
		if len(raw) > 0 {
			return string(raw), nil
		}
		if !set {
			return nil, nil
		}
		b, err := json.Marshal(typed)
		return string(b), err
	}
	if gate, err = enc(it.Gate, it.GateRecord, it.GateRecord != nil); err != nil {
		return nil, nil, "", err
	}
	if checks, err = enc(it.Checks, it.CheckResults, it.CheckResults != nil); err != nil {
		return nil, nil, "", err
	}
	a, err := enc(it.Artifacts, it.ArtifactRefs, true)
	if err != nil {
		return nil, nil, "", err
	}
	return gate, checks, a.(string), nil
}

// UpsertIteration inserts or replaces the row of (run, iteration).
func (tx *Tx) UpsertIteration(ctx context.Context, it *spec.Iteration) error {
	metrics, err := json.Marshal(it.Metrics)
	if err != nil {
		return err
	}
	gate, checks, artifacts, err := encodeIterationJSON(it)
	if err != nil {
		return fmt.Errorf("upsert iteration: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO iterations (`+iterCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)
		ON CONFLICT (run_id, iteration) DO UPDATE SET attempt=excluded.attempt, status=excluded.status,
		started_at=excluded.started_at, ended_at=excluded.ended_at, summary=excluded.summary, gate=excluded.gate,
		checks=excluded.checks, fingerprint=excluded.fingerprint, error=excluded.error,
		error_fingerprint=excluded.error_fingerprint, metrics=excluded.metrics, artifacts=excluded.artifacts`,
		it.RunID, it.Iteration, it.Attempt, it.Status, ms(it.StartedAt), ms(it.EndedAt), it.Summary, gate, checks,
		it.Fingerprint, it.Error, it.ErrorFingerprint, string(metrics), artifacts)
	if err != nil {
		return fmt.Errorf("upsert iteration: %w", err)
	}
	return nil
}

// FindIteration returns one iteration row inside tx.
func (tx *Tx) FindIteration(ctx context.Context, runID string, n int) (*spec.Iteration, error) {
	it, err := scanIteration(tx.QueryRow(ctx, `SELECT `+iterCols+` FROM iterations WHERE run_id = $1 AND iteration = $2`, runID, n))
	return it, notFound(err, "Iteration")
}

// RecentIterations returns the run's last n finished iterations, newest first.
func (tx *Tx) RecentIterations(ctx context.Context, runID string, n int) ([]*spec.Iteration, error) {
	rows, err := tx.Query(ctx, `SELECT `+iterCols+` FROM iterations WHERE run_id = $1 AND status != 'running'
		ORDER BY iteration DESC LIMIT $2`, runID, n)
	if err != nil {
		return nil, err
	}
	return scanIterations(rows)
}

// PastIterations returns the run's last n finished iterations below
// before, newest first: summaries and gate records, and the check results
// of the newest only, as stored JSON. Being on every iteration's path,
// inside the writer's transaction, it reads four columns and decodes
// nothing; the engine decodes after the transaction.
func (tx *Tx) PastIterations(ctx context.Context, runID string, before, n int) ([]*spec.PastIteration, error) {
	rows, err := tx.Query(ctx, `SELECT iteration, summary, gate, checks FROM iterations
		WHERE run_id = $1 AND iteration < $2 AND status != 'running' ORDER BY iteration DESC LIMIT $3`, runID, before, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.PastIteration
	for rows.Next() {
		p := &spec.PastIteration{}
		var gate, checks []byte
		if err := rows.Scan(&p.Iteration, &p.Summary, &gate, &checks); err != nil {
			return nil, err
		}
		if len(gate) > 0 && string(gate) != "null" {
			p.Gate = gate
		}
		if len(out) == 0 && len(checks) > 0 {
			p.Checks = checks
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func scanIterations(rows pgx.Rows) ([]*spec.Iteration, error) {
	defer rows.Close()
	var out []*spec.Iteration
	for rows.Next() {
		it, err := scanIteration(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// ListIterations returns the user's run's iterations in order.
func (d reads) ListIterations(ctx context.Context, userID int64, runID string) ([]*spec.Iteration, error) {
	if err := d.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := d.q.Query(ctx, `SELECT `+iterCols+` FROM iterations WHERE run_id = $1 ORDER BY iteration`, runID)
	if err != nil {
		return nil, err
	}
	return scanIterations(rows)
}

// SumIterationMetrics returns the sum of the metrics of the run's iterations.
func (tx *Tx) SumIterationMetrics(ctx context.Context, runID string) (spec.Metrics, error) {
	rows, err := tx.Query(ctx, `SELECT metrics FROM iterations WHERE run_id = $1`, runID)
	if err != nil {
		return spec.Metrics{}, err
	}
	defer rows.Close()
	var m spec.Metrics
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return spec.Metrics{}, err
		}
		var it spec.Metrics
		if err := json.Unmarshal([]byte(raw), &it); err != nil {
			return spec.Metrics{}, fmt.Errorf("iteration metrics: %w", err)
		}
		m.Add(it)
	}
	return m, rows.Err()
}

// InsertLLMCall stores a call's usage.
func (tx *Tx) InsertLLMCall(ctx context.Context, c *spec.LLMCall) error {
	c.CreatedAt = tx.now
	return tx.QueryRow(ctx, `INSERT INTO llm_calls (run_id, iteration, role, model, prompt_tokens, completion_tokens,
		cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, priced, cost_source, table_cost_usd, latency_ms, error, created_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16) RETURNING id`,
		c.RunID, c.Iteration, c.Role, c.Model, c.PromptTokens, c.CompletionTokens, c.CachedTokens, c.CacheWriteTokens, c.ReasoningTokens,
		c.CostUSD, c.Priced, c.CostSource, c.TableCostUSD, c.LatencyMS, c.Error, tx.now.UnixMilli()).Scan(&c.ID)
}

// ListLLMCalls returns the user's run's model calls in order.
func (d *DB) ListLLMCalls(ctx context.Context, userID int64, runID string) ([]*spec.LLMCall, error) {
	if err := d.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, `SELECT id, run_id, iteration, role, model, prompt_tokens, completion_tokens,
		cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, priced, cost_source, table_cost_usd, latency_ms, error, created_at FROM llm_calls WHERE run_id = $1 ORDER BY id`, runID)
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
		c.CreatedAt = fromMS(&created)
		out = append(out, &c)
	}
	return out, rows.Err()
}

const sumLLMCallsSQL = `SELECT model, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens,
	cost_usd, priced, cost_source FROM llm_calls
	WHERE run_id = $1 AND iteration = $2`

// SumLLMCalls returns the usage of the run's calls made in iteration.
func (tx *Tx) SumLLMCalls(ctx context.Context, runID string, iteration int) (spec.Metrics, error) {
	rows, err := tx.Query(ctx, sumLLMCallsSQL, runID, iteration)
	if err != nil {
		return spec.Metrics{}, err
	}
	return sumCalls(rows)
}

// SumLLMCalls returns the usage of the run's calls made in iteration.
func (d *DB) SumLLMCalls(ctx context.Context, runID string, iteration int) (spec.Metrics, error) {
	rows, err := d.pool.Query(ctx, sumLLMCallsSQL, runID, iteration)
	if err != nil {
		return spec.Metrics{}, err
	}
	return sumCalls(rows)
}

func sumCalls(rows pgx.Rows) (spec.Metrics, error) {
	defer rows.Close()
	var m spec.Metrics
	for rows.Next() {
		var c spec.LLMCall
		if err := rows.Scan(&c.Model, &c.PromptTokens, &c.CompletionTokens, &c.CachedTokens, &c.CacheWriteTokens,
			&c.ReasoningTokens, &c.CostUSD, &c.Priced, &c.CostSource); err != nil {
			return spec.Metrics{}, err
		}
		m.AddLLMCall(c)
	}
	return m, rows.Err()
}
