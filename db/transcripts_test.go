package db

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/db/sqlstore"
	"homework/engine/spec"
)

func appendLines(t *testing.T, d *DB, runID string, iteration int, capBytes int64, dropped int64, lines ...*spec.TranscriptLine) *spec.TranscriptInfo {
	t.Helper()
	var info *spec.TranscriptInfo
	err := d.WriteTx(context.Background(), func(tx spec.Tx) error {
		var err error
		_, info, err = tx.AppendTranscript(context.Background(), runID, iteration, capBytes, lines, dropped)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestTranscriptKeepsLinesInOrderPerIteration(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "t.db"))
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	other, _ := d.CreateUser(ctx, "b@example.com", "h", false)
	newRun(t, d, u.ID, "r1")

	appendLines(t, d, "r1", 1, 1<<20, 0,
		&spec.TranscriptLine{Kind: "assistant", Role: "executor", Text: "I will list the documents."},
		&spec.TranscriptLine{Kind: "tool_call", Name: "workspace_list", Text: `{"path":"/"}`})
	appendLines(t, d, "r1", 1, 1<<20, 0,
		&spec.TranscriptLine{Kind: "tool_result", Name: "workspace_list", Text: "scratchpad.md", Data: json.RawMessage(`{"ok":true}`)})
	appendLines(t, d, "r1", 2, 1<<20, 0, &spec.TranscriptLine{Kind: "assistant", Text: "second iteration"})

	tr, err := d.FindTranscript(ctx, u.ID, "r1", 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range tr.Lines {
		got = append(got, fmt.Sprintf("%d:%s:%s", l.Seq, l.Kind, l.Text))
	}
	want := []string{`1:assistant:I will list the documents.`, `2:tool_call:{"path":"/"}`, `3:tool_result:scratchpad.md`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lines = %q, want %q", got, want)
	}
	if string(tr.Lines[2].Data) != `{"ok":true}` || tr.Info.Lines != 3 {
		t.Fatalf("data %s, info %+v", tr.Lines[2].Data, tr.Info)
	}

	t.Run("after a seq only the newer lines come, limited", func(t *testing.T) {
		tr, err := d.FindTranscript(ctx, u.ID, "r1", 1, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Lines) != 1 || tr.Lines[0].Seq != 2 || !tr.More {
			t.Fatalf("got %d lines (first %+v), more %v", len(tr.Lines), tr.Lines[0], tr.More)
		}
	})
	t.Run("another user's run is not found", func(t *testing.T) {
		if _, err := d.FindTranscript(ctx, other.ID, "r1", 1, 0, 0); spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Fatalf("err = %v, want ENOTFOUND", err)
		}
	})
	t.Run("an iteration that never began is not found", func(t *testing.T) {
		if _, err := d.FindTranscript(ctx, u.ID, "r1", 9, 0, 0); spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Fatalf("err = %v, want ENOTFOUND", err)
		}
	})
}

func TestTranscriptCapCutsAndCountsWhatItDrops(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "t.db"))
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	newRun(t, d, u.ID, "r1")
	const capBytes = 100
	// 60 bytes fit; of the next 60 only 40 (cut at a rune boundary: "é" is
	// two bytes and must not be split); the third line has no room.
	appendLines(t, d, "r1", 1, capBytes, 0, &spec.TranscriptLine{Kind: "output", Text: strings.Repeat("a", 60)})
	appendLines(t, d, "r1", 1, capBytes, 0,
		&spec.TranscriptLine{Kind: "output", Text: strings.Repeat("b", 39) + "é" + strings.Repeat("c", 19)},
		&spec.TranscriptLine{Kind: "output", Text: "dropped entirely"})
	info := appendLines(t, d, "r1", 1, capBytes, 1000) // bytes the writer refused itself
	if info.Bytes != 99 || info.DroppedBytes != 21+16+1000 || info.DroppedLines != 1 || info.CapBytes != capBytes {
		t.Fatalf("info = %+v", info)
	}
	tr, err := d.FindTranscript(ctx, u.ID, "r1", 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Lines) != 2 || tr.Lines[1].Text != strings.Repeat("b", 39) {
		t.Fatalf("lines = %+v", tr.Lines)
	}
}

func TestPageIterationsWalksBothWays(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "t.db"))
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	other, _ := d.CreateUser(ctx, "b@example.com", "h", false)
	newRun(t, d, u.ID, "r1")
	err := d.WriteTx(ctx, func(tx spec.Tx) error {
		for i := 1; i <= 7; i++ {
			if err := tx.UpsertIteration(ctx, &spec.Iteration{RunID: "r1", Iteration: i, Attempt: 1, Status: spec.IterSucceeded, StartedAt: tx.Now(), Summary: fmt.Sprint("it ", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	appendLines(t, d, "r1", 6, 1<<20, 0, &spec.TranscriptLine{Kind: "note", Text: "hello"})

	walk := func(desc bool) []int {
		var seen []int
		cursor := ""
		for {
			p, err := d.PageIterations(ctx, u.ID, "r1", cursor, 3, desc)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Iterations {
				seen = append(seen, it.Iteration)
				if it.Iteration == 6 && (p.Transcripts[6] == nil || p.Transcripts[6].Lines != 1) {
					t.Fatalf("iteration 6's transcript info missing: %+v", p.Transcripts)
				}
			}
			if p.NextCursor == "" {
				return seen
			}
			cursor = p.NextCursor
		}
	}
	if got := fmt.Sprint(walk(false)); got != "[1 2 3 4 5 6 7]" {
		t.Fatalf("ascending = %s", got)
	}
	if got := fmt.Sprint(walk(true)); got != "[7 6 5 4 3 2 1]" {
		t.Fatalf("descending = %s", got)
	}
	if _, err := d.PageIterations(ctx, u.ID, "r1", "garbage", 3, false); spec.ErrorCode(err) != spec.EINVALID || spec.ErrorField(err) != "cursor" {
		t.Fatalf("bad cursor: %v", err)
	}
	if _, err := d.PageIterations(ctx, other.ID, "r1", "", 3, false); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("other user: %v", err)
	}
}

// The action index's predicate is what ListRunActions repeats, names exactly
// the action event types, serves the query, and costs an event append no
// temporary table (an IN list of constants in a partial index's predicate
// builds one per inserted row).
func TestRunActionsIndex(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "t.db"))
	var want []string
	for _, typ := range spec.ActionEventTypes {
		want = append(want, "type = '"+string(typ)+"'")
	}
	if got := strings.Join(strings.Fields(sqlstore.ActionPredicate), " "); got != strings.Join(want, " OR ") {
		t.Errorf("ActionPredicate = %s\nwant the action event types %v", got, spec.ActionEventTypes)
	}
	var sqlText string
	if err := d.reader.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'events_run_actions'`).Scan(&sqlText); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.Join(strings.Fields(sqlText), " "), "WHERE "+strings.Join(want, " OR ")) {
		t.Errorf("index events_run_actions = %s", sqlText)
	}
	plan := explain(t, d, `EXPLAIN QUERY PLAN SELECT `+sqlstore.EventColumns+` FROM events WHERE run_id = ? AND (`+sqlstore.ActionPredicate+`) AND created_at >= ? ORDER BY seq LIMIT 2000`, "r", 0)
	if !strings.Contains(plan, "USING INDEX events_run_actions") {
		t.Errorf("ListRunActions does not use the action index:\n%s", plan)
	}
	insert := explain(t, d, `EXPLAIN INSERT INTO events (run_id, user_id, seq, type, data, created_at) VALUES (?,?,?,?,?,?)`,
		"r", 1, 1, "tool_call", "{}", 0)
	if strings.Contains(insert, "OpenEphemeral") {
		t.Errorf("an event insert builds a temporary table:\n%s", insert)
	}

	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	newRun(t, d, u.ID, "r1")
	for _, typ := range []spec.EventType{spec.EventIterationStarted, spec.EventToolCall, spec.EventRunWaitingOnUser, spec.EventGateDecision, spec.EventRunCompleted} {
		if _, err := d.AppendEvent(ctx, "r1", typ, nil); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := d.ListRunActions(ctx, "r1", time.Time{})
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Type))
	}
	if err != nil || fmt.Sprint(got) != "[iteration_started run_waiting_on_user run_completed]" {
		t.Errorf("run actions = %v (%v)", got, err)
	}
}

// explain returns the rows of an EXPLAIN statement, one line each.
func explain(t *testing.T, d *DB, query string, args ...any) string {
	t.Helper()
	rows, err := d.reader.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&b, vals...)
	}
	return b.String()
}
