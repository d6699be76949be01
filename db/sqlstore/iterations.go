package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"homework/engine/spec"
)

const iterCols = `run_id, iteration, attempt, status, started_at, ended_at, summary, gate, checks,
	fingerprint, error, error_fingerprint, metrics, artifacts`

func scanIteration(s Row) (*spec.Iteration, error) {
	var it spec.Iteration
	var started, ended sql.NullInt64
	var gate, checks sql.NullString
	var metrics, artifacts string
	if err := s.Scan(&it.RunID, &it.Iteration, &it.Attempt, &it.Status, &started, &ended, &it.Summary, &gate, &checks,
		&it.Fingerprint, &it.Error, &it.ErrorFingerprint, &metrics, &artifacts); err != nil {
		return nil, err
	}
	it.StartedAt, it.EndedAt = fromMS(started), fromMS(ended)
	if err := json.Unmarshal([]byte(metrics), &it.Metrics); err != nil {
		return nil, fmt.Errorf("iteration metrics: %w", err)
	}
	if err := decodeIterationJSON(&it, gate, checks, artifacts); err != nil {
		return nil, fmt.Errorf("iteration %s/%d: %w", it.RunID, it.Iteration, err)
	}
	return &it, nil
}

// decodeIterationJSON decodes the gate, checks and artifacts columns into
// their typed fields, once, at the store boundary; the raw JSON is kept too.
func decodeIterationJSON(it *spec.Iteration, gate, checks sql.NullString, artifacts string) error {
	if gate.Valid && gate.String != "" && gate.String != "null" {
		it.Gate = json.RawMessage(gate.String)
		it.GateRecord = &spec.GateRecord{}
		if err := json.Unmarshal(it.Gate, it.GateRecord); err != nil {
			return fmt.Errorf("gate: %w", err)
		}
	}
	if checks.Valid && checks.String != "" {
		it.Checks = json.RawMessage(checks.String)
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
// JSON set by the writer wins (the row it read may carry stale typed fields);
// otherwise the typed fields are encoded.
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
	return tx.execHeld(ctx, -1, nil, "upsert iteration", `INSERT INTO iterations (`+iterCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT (run_id, iteration) DO UPDATE SET attempt=excluded.attempt, status=excluded.status,
		started_at=excluded.started_at, ended_at=excluded.ended_at, summary=excluded.summary, gate=excluded.gate,
		checks=excluded.checks, fingerprint=excluded.fingerprint, error=excluded.error,
		error_fingerprint=excluded.error_fingerprint, metrics=excluded.metrics, artifacts=excluded.artifacts`,
		it.RunID, it.Iteration, it.Attempt, it.Status, ms(it.StartedAt), ms(it.EndedAt), it.Summary, gate, checks,
		it.Fingerprint, it.Error, it.ErrorFingerprint, string(metrics), artifacts)
}

// FindIteration returns one iteration row inside tx.
func (tx *Tx) FindIteration(ctx context.Context, runID string, n int) (*spec.Iteration, error) {
	it, err := scanIteration(tx.c.QueryRow(ctx, `SELECT `+iterCols+` FROM iterations WHERE run_id = ? AND iteration = ?`, runID, n))
	return it, notFound(err, "Iteration")
}

// RecentIterations returns the run's last n finished iterations, newest first.
func (tx *Tx) RecentIterations(ctx context.Context, runID string, n int) ([]*spec.Iteration, error) {
	rows, err := tx.c.Query(ctx, `SELECT `+iterCols+` FROM iterations WHERE run_id = ? AND status != 'running'
		ORDER BY iteration DESC LIMIT ?`, runID, n)
	if err != nil {
		return nil, err
	}
	return scanIterations(rows)
}

// PastIterations returns the run's last n finished iterations below
// before, newest first: summaries and gate records, and the check results
// of the newest only, as stored JSON. Being on every iteration's path, it
// reads four columns and decodes nothing.
func (r Reads) PastIterations(ctx context.Context, runID string, before, n int) ([]*spec.PastIteration, error) {
	rows, err := r.c.Query(ctx, `SELECT iteration, summary, gate, checks FROM iterations
		WHERE run_id = ? AND iteration < ? AND status != 'running' ORDER BY iteration DESC LIMIT ?`, runID, before, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.PastIteration
	for rows.Next() {
		p := &spec.PastIteration{}
		var gate, checks []byte // valid until Next
		if err := rows.Scan(&p.Iteration, &p.Summary, &gate, &checks); err != nil {
			return nil, err
		}
		if len(gate) > 0 && string(gate) != "null" {
			p.Gate = json.RawMessage(append([]byte(nil), gate...))
		}
		if len(out) == 0 && len(checks) > 0 {
			p.Checks = json.RawMessage(append([]byte(nil), checks...))
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func scanIterations(rows Rows) ([]*spec.Iteration, error) {
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
func (r Reads) ListIterations(ctx context.Context, userID int64, runID string) ([]*spec.Iteration, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := r.c.Query(ctx, `SELECT `+iterCols+` FROM iterations WHERE run_id = ? ORDER BY iteration`, runID)
	if err != nil {
		return nil, err
	}
	return scanIterations(rows)
}

// SumIterationMetrics returns the sum of the metrics of the run's iterations.
func (tx *Tx) SumIterationMetrics(ctx context.Context, runID string) (spec.Metrics, error) {
	rows, err := tx.c.Query(ctx, `SELECT metrics FROM iterations WHERE run_id = ?`, runID)
	if err != nil {
		return spec.Metrics{}, err
	}
	defer rows.Close()
	var m spec.Metrics
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return spec.Metrics{}, err
		}
		var it spec.Metrics
		if err := json.Unmarshal(raw, &it); err != nil {
			return spec.Metrics{}, fmt.Errorf("iteration metrics: %w", err)
		}
		m.Add(it)
	}
	return m, rows.Err()
}

// SumIterationMetricsFrom returns the sums of the metrics of the run's
// iterations numbered from on: those below below, and the others.
func (tx *Tx) SumIterationMetricsFrom(ctx context.Context, runID string, from, below int) (settled, rest spec.Metrics, err error) {
	rows, err := tx.c.Query(ctx, `SELECT iteration, metrics FROM iterations WHERE run_id = ? AND iteration >= ?`, runID, from)
	if err != nil {
		return settled, rest, err
	}
	defer rows.Close()
	for rows.Next() {
		var n int
		var raw []byte
		if err := rows.Scan(&n, &raw); err != nil {
			return spec.Metrics{}, spec.Metrics{}, err
		}
		var it spec.Metrics
		if err := json.Unmarshal(raw, &it); err != nil {
			return spec.Metrics{}, spec.Metrics{}, fmt.Errorf("iteration metrics: %w", err)
		}
		if n < below {
			settled.Add(it)
		} else {
			rest.Add(it)
		}
	}
	return settled, rest, rows.Err()
}
