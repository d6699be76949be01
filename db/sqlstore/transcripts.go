package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"homework/engine/spec"
)

const transcriptInfoCols = `run_id, iteration, lines, bytes, dropped_bytes, dropped_lines, cap_bytes`

func scanTranscriptInfo(s Row) (*spec.TranscriptInfo, error) {
	var t spec.TranscriptInfo
	err := s.Scan(&t.RunID, &t.Iteration, &t.Lines, &t.Bytes, &t.DroppedBytes, &t.DroppedLines, &t.CapBytes)
	return &t, err
}

// maxTranscriptChunk is the most lines one insert writes.
const maxTranscriptChunk = 8

// insertTranscriptQueries holds the multi-row line insert of each chunk
// size, built once: an iteration's lines go in with one statement.
var insertTranscriptQueries = func() map[int]string {
	out := map[int]string{}
	for n := 1; n <= maxTranscriptChunk; n++ {
		out[n] = `INSERT INTO transcript_lines (run_id, iteration, seq, attempt, kind, name, role, text, data, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)` +
			strings.Repeat(",(?,?,?,?,?,?,?,?,?,?)", n-1)
	}
	return out
}()

// AppendTranscript appends lines to the transcript of (runID, iteration)
// inside tx, keeping at most capBytes of text and data for the iteration in
// all attempts together. The line that reaches the cap is cut at a rune
// boundary; every line after it is dropped. What is cut is counted in the
// iteration's TranscriptInfo, with dropped more bytes the caller refused
// itself once the cap was reached. It fills in the stored lines' Seq, RunID,
// Iteration and CreatedAt and returns them with the updated info.
func (tx *Tx) AppendTranscript(ctx context.Context, runID string, iteration int, capBytes int64, lines []*spec.TranscriptLine, dropped int64) ([]*spec.TranscriptLine, *spec.TranscriptInfo, error) {
	if kept, info, ok, err := tx.appendFirstTranscript(ctx, runID, iteration, capBytes, lines, dropped); ok || err != nil {
		return kept, info, err
	}
	// The iteration's info row is locked first (where several processes
	// write), so appends from concurrent transactions number their lines
	// one after the other. A row this statement creates is locked by it,
	// and no line can exist without it.
	created, err := tx.c.Exec(ctx, `INSERT INTO transcripts (run_id, iteration, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (run_id, iteration) DO NOTHING`, runID, iteration, tx.now.UnixMilli())
	if err != nil {
		return nil, nil, fmt.Errorf("create transcript info: %w", err)
	}
	info := &spec.TranscriptInfo{RunID: runID, Iteration: iteration}
	next := int64(1)
	if created == 0 {
		if info, err = scanTranscriptInfo(tx.c.QueryRow(ctx, `SELECT `+transcriptInfoCols+` FROM transcripts
			WHERE run_id = ? AND iteration = ?`+tx.d.ForUpdate, runID, iteration)); err != nil {
			return nil, nil, fmt.Errorf("read transcript info: %w", err)
		}
		if err := tx.c.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM transcript_lines WHERE run_id = ? AND iteration = ?`,
			runID, iteration).Scan(&next); err != nil {
			return nil, nil, fmt.Errorf("load transcript seq: %w", err)
		}
	}
	info.CapBytes = capBytes
	info.DroppedBytes += dropped
	kept := spec.CapTranscript(info, lines, next, tx.now)
	if err := tx.insertTranscriptLines(ctx, runID, iteration, kept); err != nil {
		return nil, nil, err
	}
	if _, err := tx.c.Exec(ctx, `UPDATE transcripts SET lines = ?, bytes = ?, dropped_bytes = ?, dropped_lines = ?,
		cap_bytes = ?, updated_at = ? WHERE run_id = ? AND iteration = ?`, info.Lines, info.Bytes,
		info.DroppedBytes, info.DroppedLines, info.CapBytes, tx.now.UnixMilli(), runID, iteration); err != nil {
		return nil, nil, fmt.Errorf("update transcript info: %w", err)
	}
	return kept, info, nil
}

// appendFirstTranscript makes the iteration's first append, when nothing
// in it is cut, in two statements: its info row is created with the
// totals the lines make, and the lines inserted. ok is false, with nothing
// written, when the lines do not all fit or the iteration has its row
// already: AppendTranscript then appends as to an existing transcript.
func (tx *Tx) appendFirstTranscript(ctx context.Context, runID string, iteration int, capBytes int64, lines []*spec.TranscriptLine, dropped int64) (kept []*spec.TranscriptLine, info *spec.TranscriptInfo, ok bool, err error) {
	var size int64
	for _, l := range lines {
		size += int64(len(l.Text) + len(l.Data))
	}
	if dropped != 0 || size > capBytes {
		return nil, nil, false, nil
	}
	// Nothing is cut from lines that fit an empty transcript, so numbering
	// them here changes nothing the general path would not set again.
	info = &spec.TranscriptInfo{RunID: runID, Iteration: iteration, CapBytes: capBytes}
	kept = spec.CapTranscript(info, lines, 1, tx.now)
	created, err := tx.c.Exec(ctx, `INSERT INTO transcripts (run_id, iteration, lines, bytes, dropped_bytes, dropped_lines, cap_bytes, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, iteration) DO NOTHING`, runID, iteration, info.Lines, info.Bytes,
		info.DroppedBytes, info.DroppedLines, info.CapBytes, tx.now.UnixMilli())
	if err != nil {
		return nil, nil, false, fmt.Errorf("create transcript info: %w", err)
	}
	if created == 0 {
		return nil, nil, false, nil
	}
	if err := tx.insertTranscriptLines(ctx, runID, iteration, kept); err != nil {
		return nil, nil, false, err
	}
	return kept, info, true, nil
}

// insertTranscriptLines inserts lines, numbered, in as few statements as
// maxTranscriptChunk allows.
func (tx *Tx) insertTranscriptLines(ctx context.Context, runID string, iteration int, lines []*spec.TranscriptLine) error {
	for len(lines) > 0 {
		n := min(len(lines), maxTranscriptChunk)
		args := make([]any, 0, 10*n)
		for _, l := range lines[:n] {
			data, _ := jsonOrNil(l.Data)
			args = append(args, runID, iteration, l.Seq, l.Attempt, l.Kind, l.Name, l.Role, l.Text, data, tx.now.UnixMilli())
		}
		if err := tx.execHeld(ctx, -1, nil, "insert transcript lines", insertTranscriptQueries[n], args...); err != nil {
			return err
		}
		lines = lines[n:]
	}
	return nil
}

// FindTranscript returns the user's run's iteration transcript lines after
// afterSeq, at most limit of them (all when limit <= 0), read in one
// transaction. A run of another user, or an iteration that never began, is
// ENOTFOUND; an iteration that began and wrote nothing has an empty one.
func (r Reads) FindTranscript(ctx context.Context, userID int64, runID string, iteration int, afterSeq int64, limit int) (*spec.Transcript, error) {
	rtx, done, err := r.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var n int
	if err := rtx.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = ? AND user_id = ?`, runID, userID).Scan(&n); err != nil {
		return nil, notFound(err, "Run")
	}
	t := &spec.Transcript{Info: spec.TranscriptInfo{RunID: runID, Iteration: iteration}}
	info, err := scanTranscriptInfo(rtx.QueryRow(ctx, `SELECT `+transcriptInfoCols+` FROM transcripts
		WHERE run_id = ? AND iteration = ?`, runID, iteration))
	switch {
	case err == nil:
		t.Info = *info
	case !errors.Is(err, sql.ErrNoRows):
		return nil, err
	default:
		// No transcript yet: the iteration must exist (begun, with
		// nothing written so far), or it is not found.
		if err := rtx.QueryRow(ctx, `SELECT 1 FROM iterations WHERE run_id = ? AND iteration = ?`, runID, iteration).Scan(&n); err != nil {
			return nil, notFound(err, "Iteration")
		}
	}
	q := `SELECT iteration, seq, attempt, kind, name, role, text, data, created_at FROM transcript_lines
		WHERE run_id = ? AND iteration = ? AND seq > ? ORDER BY seq`
	args := []any{runID, iteration, afterSeq}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit+1)
	}
	rows, err := rtx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		l := &spec.TranscriptLine{RunID: runID}
		var data sql.NullString
		var at int64
		if err := rows.Scan(&l.Iteration, &l.Seq, &l.Attempt, &l.Kind, &l.Name, &l.Role, &l.Text, &data, &at); err != nil {
			return nil, err
		}
		if data.Valid {
			l.Data = json.RawMessage(data.String)
		}
		l.CreatedAt = time.UnixMilli(at).UTC()
		t.Lines = append(t.Lines, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if limit > 0 && len(t.Lines) > limit {
		t.Lines, t.More = t.Lines[:limit], true
	}
	return t, nil
}

// transcriptInfos returns the transcript info of the run's iterations in
// [from, to], keyed by iteration.
func transcriptInfos(ctx context.Context, q Conn, runID string, from, to int) (map[int]*spec.TranscriptInfo, error) {
	rows, err := q.Query(ctx, `SELECT `+transcriptInfoCols+` FROM transcripts
		WHERE run_id = ? AND iteration BETWEEN ? AND ?`, runID, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]*spec.TranscriptInfo{}
	for rows.Next() {
		t, err := scanTranscriptInfo(rows)
		if err != nil {
			return nil, err
		}
		out[t.Iteration] = t
	}
	return out, rows.Err()
}

// PageIterations returns one page of the user's run's iterations, oldest
// first, or newest first when desc is set, read in one transaction. The
// cursor is the previous page's NextCursor. A run of another user is
// ENOTFOUND; a bad cursor is EINVALID on field cursor.
func (r Reads) PageIterations(ctx context.Context, userID int64, runID, cursor string, limit int, desc bool) (*spec.IterationPage, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	after := 0
	if desc {
		after = 1 << 30 // iteration is a 32-bit column
	}
	if cursor != "" {
		n, err := spec.ParseIterationCursor(cursor)
		if err != nil {
			return nil, err
		}
		after = n
	}
	rtx, done, err := r.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var one int
	if err := rtx.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = ? AND user_id = ?`, runID, userID).Scan(&one); err != nil {
		return nil, notFound(err, "Run")
	}
	q := `SELECT ` + iterCols + ` FROM iterations WHERE run_id = ? AND iteration > ? ORDER BY iteration LIMIT ?`
	if desc {
		q = `SELECT ` + iterCols + ` FROM iterations WHERE run_id = ? AND iteration < ? ORDER BY iteration DESC LIMIT ?`
	}
	rows, err := rtx.Query(ctx, q, runID, after, limit+1)
	if err != nil {
		return nil, err
	}
	its, err := scanIterations(rows)
	if err != nil {
		return nil, err
	}
	page := &spec.IterationPage{Iterations: its}
	if len(its) > limit {
		page.Iterations = its[:limit]
		page.NextCursor = spec.IterationCursor(page.Iterations[limit-1].Iteration)
	}
	if len(page.Iterations) > 0 {
		lo, hi := page.Iterations[0].Iteration, page.Iterations[len(page.Iterations)-1].Iteration
		if lo > hi {
			lo, hi = hi, lo
		}
		if page.Transcripts, err = transcriptInfos(ctx, rtx, runID, lo, hi); err != nil {
			return nil, err
		}
	}
	return page, nil
}

// SearchTranscripts returns up to limit lines of the user's run's
// transcripts whose text contains q (case-insensitive for ASCII), oldest
// first. A run of another user is ENOTFOUND.
func (r Reads) SearchTranscripts(ctx context.Context, userID int64, runID, q string, limit int) ([]*spec.TranscriptLine, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(q)
	rows, err := r.c.Query(ctx, `SELECT iteration, seq, attempt, kind, name, role, text, created_at FROM transcript_lines
		WHERE run_id = ? AND (text `+r.d.Search.ILike()+` ? ESCAPE '\' OR name `+r.d.Search.ILike()+` ? ESCAPE '\') ORDER BY iteration, seq LIMIT ?`,
		runID, "%"+esc+"%", "%"+esc+"%", limit)
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
