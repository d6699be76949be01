package db

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"homework/engine/spec"
)

func TestListRunsFindsAndOrdersRuns(t *testing.T) {
	ctx := context.Background()
	day := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	now := day
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"), func(o *Options) { o.Now = func() time.Time { return now } })
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	other, _ := d.CreateUser(ctx, "b@example.com", "h", false)
	put := func(id, objective, executor, status, stop string, cost float64, created time.Time, owner int64) *spec.Run {
		t.Helper()
		now = created
		r := &spec.Run{ID: id, UserID: owner, Objective: objective, Mode: "auto", Executor: executor, Config: json.RawMessage(`{}`),
			Status: status, Metrics: spec.Metrics{CostTotalUSD: cost}}
		if stop != "" {
			r.StopReason = &spec.StopReason{Type: stop}
		}
		if err := d.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, r) }); err != nil {
			t.Fatal(err)
		}
		return r
	}
	put("r1", "Compare SQLite drivers for Go", "llm", spec.StatusCompleted, "completed", 0.30, day, u.ID)
	put("r2", "Write a haiku about queues", "command", spec.StatusStopped, "max_iterations", 0.10, day.Add(24*time.Hour), u.ID)
	put("r3", "Summarise the river docs", "llm", spec.StatusStopped, "budget_cost", 2.50, day.Add(48*time.Hour), u.ID)
	put("r4", "Compare ORMs", "script", spec.StatusQueued, "", 0, day.Add(72*time.Hour), u.ID)
	put("x1", "Compare SQLite drivers for Go", "llm", spec.StatusCompleted, "completed", 9, day, other.ID)
	// r3's workspace mentions the driver: search finds it through its documents.
	now = day.Add(49 * time.Hour)
	if err := d.WriteTx(ctx, func(tx spec.Tx) error {
		_, err := tx.PutDocument(ctx, &spec.Document{RunID: "r3", UserID: u.ID, Path: "notes.md", Kind: spec.DocNote, Content: "The modernc driver is pure Go."})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ids := func(f spec.RunFilter) string {
		t.Helper()
		p, err := d.ListRuns(ctx, u.ID, f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		s := ""
		for _, r := range p.Runs {
			s += r.ID + " "
		}
		return s
	}
	cases := []struct {
		name string
		f    spec.RunFilter
		want string
	}{
		{"newest first by default", spec.RunFilter{}, "r4 r3 r2 r1 "},
		{"oldest first", spec.RunFilter{Sort: spec.SortOldest}, "r1 r2 r3 r4 "},
		{"most expensive first", spec.RunFilter{Sort: spec.SortCostDesc}, "r3 r1 r2 r4 "},
		{"cheapest first", spec.RunFilter{Sort: spec.SortCostAsc}, "r4 r2 r1 r3 "},
		{"words of the objective, stemmed", spec.RunFilter{Query: "comparing"}, "r4 r1 "},
		{"every word must match", spec.RunFilter{Query: "compare sqlite"}, "r1 "},
		{"words in a run's documents", spec.RunFilter{Query: "driver"}, "r3 r1 "},
		{"FTS syntax is plain text", spec.RunFilter{Query: `"NEAR( OR *`}, ""},
		{"by executor", spec.RunFilter{Executor: "llm"}, "r3 r1 "},
		{"by stop reason", spec.RunFilter{StopType: "max_iterations"}, "r2 "},
		{"by status and query", spec.RunFilter{Status: spec.StatusStopped, Query: "river"}, "r3 "},
		{"by date", spec.RunFilter{CreatedFrom: day.Add(24 * time.Hour), CreatedBefore: day.Add(72 * time.Hour)}, "r3 r2 "},
	}
	for _, c := range cases {
		if got := ids(c.f); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	if _, err := d.ListRuns(ctx, u.ID, spec.RunFilter{Sort: "random"}); spec.ErrorField(err) != "sort" {
		t.Fatalf("unknown sort: %v", err)
	}

	// An edited objective is found by its new words only.
	now = day.Add(100 * time.Hour)
	if err := d.WriteTx(ctx, func(tx spec.Tx) error {
		r, err := tx.FindRun(ctx, "r2")
		if err != nil {
			return err
		}
		r.Objective = "Write a sonnet about queues"
		return tx.UpdateRun(ctx, r)
	}); err != nil {
		t.Fatal(err)
	}
	if got := ids(spec.RunFilter{Query: "haiku"}); got != "" {
		t.Fatalf("old words still match: %q", got)
	}
	if got := ids(spec.RunFilter{Query: "sonnet"}); got != "r2 " {
		t.Fatalf("new words: %q", got)
	}
}

func TestListRunsPagesEveryOrderWithoutGapsOrRepeats(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"), func(o *Options) { o.Now = func() time.Time { return now } })
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	const n = 2500
	err := d.WriteTx(ctx, func(tx spec.Tx) error {
		for i := 0; i < n; i++ {
			// Many runs share a creation time and a cost, so ties are paged
			// by id; costs like 0.1+0.2 do not survive a decimal round trip
			// unless the cursor keeps every digit.
			now = time.UnixMilli(1_700_000_000_000 + int64(i/7))
			r := &spec.Run{ID: fmt.Sprintf("run%05d", i), UserID: u.ID, Objective: "objective", Mode: "auto", Executor: "llm",
				Config: json.RawMessage(`{}`), Status: spec.StatusCompleted, Metrics: spec.Metrics{CostTotalUSD: float64(i%13)*0.1 + 0.2}}
			if err := tx.InsertRun(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sort := range spec.RunSorts {
		seen := map[string]bool{}
		cursor, pages := "", 0
		var prev *spec.Run
		for {
			p, err := d.ListRuns(ctx, u.ID, spec.RunFilter{Sort: sort, Limit: 200, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, r := range p.Runs {
				if seen[r.ID] {
					t.Fatalf("%s: %s repeated", sort, r.ID)
				}
				seen[r.ID] = true
				if prev != nil && !inOrder(sort, prev, r) {
					t.Fatalf("%s: %s before %s", sort, prev.ID, r.ID)
				}
				prev = r
			}
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
		if len(seen) != n || pages != (n+199)/200 {
			t.Fatalf("%s: %d runs in %d pages, want %d", sort, len(seen), pages, n)
		}
	}
}

func inOrder(sort string, a, b *spec.Run) bool {
	switch sort {
	case spec.SortNewest:
		return a.CreatedAt.After(b.CreatedAt) || (a.CreatedAt.Equal(b.CreatedAt) && a.ID > b.ID)
	case spec.SortOldest:
		return a.CreatedAt.Before(b.CreatedAt) || (a.CreatedAt.Equal(b.CreatedAt) && a.ID < b.ID)
	case spec.SortCostDesc:
		return a.Metrics.CostTotalUSD > b.Metrics.CostTotalUSD || (a.Metrics.CostTotalUSD == b.Metrics.CostTotalUSD && a.ID > b.ID)
	default:
		return a.Metrics.CostTotalUSD < b.Metrics.CostTotalUSD || (a.Metrics.CostTotalUSD == b.Metrics.CostTotalUSD && a.ID < b.ID)
	}
}
