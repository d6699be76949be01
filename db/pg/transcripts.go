package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/engine/spec"
)

const transcriptInfoCols = `run_id, iteration, lines, bytes, dropped_bytes, dropped_lines, cap_bytes`

func scanTranscriptInfo(s pgx.Row) (*spec.TranscriptInfo, error) {
	var t spec.TranscriptInfo
	err := s.Scan(&t.RunID, &t.Iteration, &t.Lines, &t.Bytes, &t.DroppedBytes, &t.DroppedLines, &t.CapBytes)
	return &t, err
}

// AppendTranscript appends lines to the transcript of (runID, iteration)
// inside tx under the iteration's cap (spec.CapTranscript). The
// iteration's info row is locked first, so appends from concurrent
// transactions number their lines one after the other.
func (tx *Tx) AppendTranscript(ctx context.Context, runID string, iteration int, capBytes int64, lines []*spec.TranscriptLine, dropped int64) ([]*spec.TranscriptLine, *spec.TranscriptInfo, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO transcripts (run_id, iteration, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (run_id, iteration) DO NOTHING`, runID, iteration, tx.now.UnixMilli()); err != nil {
		return nil, nil, fmt.Errorf("create transcript info: %w", err)
	}
	info, err := scanTranscriptInfo(tx.QueryRow(ctx, `SELECT `+transcriptInfoCols+` FROM transcripts
		WHERE run_id = $1 AND iteration = $2 FOR UPDATE`, runID, iteration))
	if err != nil {
		return nil, nil, fmt.Errorf("load transcript info: %w", err)
	}
	info.CapBytes = capBytes
	info.DroppedBytes += dropped
	var next int64
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM transcript_lines WHERE run_id = $1 AND iteration = $2`,
		runID, iteration).Scan(&next); err != nil {
		return nil, nil, fmt.Errorf("load transcript seq: %w", err)
	}
	kept := spec.CapTranscript(info, lines, next, tx.now)
	for _, l := range kept {
		data, _ := jsonOrNil(l.Data)
		if _, err := tx.Exec(ctx, `INSERT INTO transcript_lines (run_id, iteration, seq, attempt, kind, name, role, text, data, created_at)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`, runID, iteration, l.Seq, l.Attempt, l.Kind, l.Name, l.Role, l.Text, data,
			tx.now.UnixMilli()); err != nil {
			return nil, nil, fmt.Errorf("insert transcript line: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE transcripts SET lines = $3, bytes = $4, dropped_bytes = $5, dropped_lines = $6,
		cap_bytes = $7, updated_at = $8 WHERE run_id = $1 AND iteration = $2`, runID, iteration, info.Lines, info.Bytes,
		info.DroppedBytes, info.DroppedLines, info.CapBytes, tx.now.UnixMilli()); err != nil {
		return nil, nil, fmt.Errorf("update transcript info: %w", err)
	}
	return kept, info, nil
}

// readTx runs fn in one read-only, repeatable-read transaction, or in the
// ReadTx it is already part of: a multi-statement read sees one snapshot.
func (d reads) readTx(ctx context.Context, fn func(q querier) error) error {
	if d.pool == nil {
		return fn(d.q)
	}
	tx, err := d.pool.BeginTx(ctx, readTxOptions)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func ownsRun(ctx context.Context, q querier, userID int64, runID string) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1 AND user_id = $2`, runID, userID).Scan(&one)
	return notFound(err, "Run")
}

// FindTranscript returns the user's run's iteration transcript lines after
// afterSeq, at most limit of them (all when limit <= 0), read in one
// transaction. A run of another user is ENOTFOUND; an iteration without a
// transcript has an empty one.
func (d reads) FindTranscript(ctx context.Context, userID int64, runID string, iteration int, afterSeq int64, limit int) (*spec.Transcript, error) {
	t := &spec.Transcript{Info: spec.TranscriptInfo{RunID: runID, Iteration: iteration}}
	err := d.readTx(ctx, func(tx querier) error {
		if err := ownsRun(ctx, tx, userID, runID); err != nil {
			return err
		}
		info, err := scanTranscriptInfo(tx.QueryRow(ctx, `SELECT `+transcriptInfoCols+` FROM transcripts
			WHERE run_id = $1 AND iteration = $2`, runID, iteration))
		switch {
		case err == nil:
			t.Info = *info
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var a args
		q := `SELECT iteration, seq, attempt, kind, name, role, text, data, created_at FROM transcript_lines
			WHERE run_id = ` + a.add(runID) + ` AND iteration = ` + a.add(iteration) + ` AND seq > ` + a.add(afterSeq) + ` ORDER BY seq`
		if limit > 0 {
			q += ` LIMIT ` + a.add(limit+1)
		}
		rows, err := tx.Query(ctx, q, a...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			l := &spec.TranscriptLine{RunID: runID}
			var data *string
			var at int64
			if err := rows.Scan(&l.Iteration, &l.Seq, &l.Attempt, &l.Kind, &l.Name, &l.Role, &l.Text, &data, &at); err != nil {
				return err
			}
			if data != nil {
				l.Data = json.RawMessage(*data)
			}
			l.CreatedAt = time.UnixMilli(at).UTC()
			t.Lines = append(t.Lines, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(t.Lines) > limit {
		t.Lines, t.More = t.Lines[:limit], true
	}
	return t, nil
}

// PageIterations returns one page of the user's run's iterations, oldest
// first, or newest first when desc is set, read in one transaction, with
// their transcript info. A run of another user is ENOTFOUND; a bad cursor is
// EINVALID on field cursor.
func (d reads) PageIterations(ctx context.Context, userID int64, runID, cursor string, limit int, desc bool) (*spec.IterationPage, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	after := 0
	if desc {
		after = 1 << 30
	}
	if cursor != "" {
		n, err := spec.ParseIterationCursor(cursor)
		if err != nil {
			return nil, err
		}
		after = n
	}
	page := &spec.IterationPage{}
	err := d.readTx(ctx, func(tx querier) error {
		if err := ownsRun(ctx, tx, userID, runID); err != nil {
			return err
		}
		q := `SELECT ` + iterCols + ` FROM iterations WHERE run_id = $1 AND iteration > $2 ORDER BY iteration LIMIT $3`
		if desc {
			q = `SELECT ` + iterCols + ` FROM iterations WHERE run_id = $1 AND iteration < $2 ORDER BY iteration DESC LIMIT $3`
		}
		rows, err := tx.Query(ctx, q, runID, after, limit+1)
		if err != nil {
			return err
		}
		its, err := scanIterations(rows)
		if err != nil {
			return err
		}
		page.Iterations = its
		if len(its) > limit {
			page.Iterations = its[:limit]
			page.NextCursor = spec.IterationCursor(page.Iterations[limit-1].Iteration)
		}
		if len(page.Iterations) == 0 {
			return nil
		}
		lo, hi := page.Iterations[0].Iteration, page.Iterations[len(page.Iterations)-1].Iteration
		if lo > hi {
			lo, hi = hi, lo
		}
		irows, err := tx.Query(ctx, `SELECT `+transcriptInfoCols+` FROM transcripts
			WHERE run_id = $1 AND iteration BETWEEN $2 AND $3`, runID, lo, hi)
		if err != nil {
			return err
		}
		defer irows.Close()
		page.Transcripts = map[int]*spec.TranscriptInfo{}
		for irows.Next() {
			t, err := scanTranscriptInfo(irows)
			if err != nil {
				return err
			}
			page.Transcripts[t.Iteration] = t
		}
		return irows.Err()
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// SearchTranscripts returns up to limit lines of the user's run's
// transcripts whose text or name contains q (case-insensitive), oldest
// first. A run of another user is ENOTFOUND.
func (d *DB) SearchTranscripts(ctx context.Context, userID int64, runID, q string, limit int) ([]*spec.TranscriptLine, error) {
	if err := d.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	pat := "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(q) + "%"
	rows, err := d.pool.Query(ctx, `SELECT iteration, seq, attempt, kind, name, role, text, created_at FROM transcript_lines
		WHERE run_id = $1 AND (text ILIKE $2 OR name ILIKE $2) ORDER BY iteration, seq LIMIT $3`, runID, pat, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.TranscriptLine
	for rows.Next() {
		l := &spec.TranscriptLine{RunID: runID}
		var at int64
		if err := rows.Scan(&l.Iteration, &l.Seq, &l.Attempt, &l.Kind, &l.Name, &l.Role, &l.Text, &at); err != nil {
			return nil, err
		}
		l.CreatedAt = time.UnixMilli(at).UTC()
		out = append(out, l)
	}
	return out, rows.Err()
}

// ListRunActions returns the run's action events (spec.ActionEventTypes)
// created at or after since, in order, at most 2,000. The caller must have
// checked ownership.
func (d reads) ListRunActions(ctx context.Context, runID string, since time.Time) ([]*spec.Event, error) {
	rows, err := d.q.Query(ctx, `SELECT `+eventCols+` FROM events WHERE run_id = $1 AND type = ANY($2)
		AND created_at >= $3 ORDER BY seq LIMIT 2000`, runID, spec.ActionEventTypes, since.UnixMilli())
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}
