package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

// seedRun stores a running scripted run with iterations finished
// iterations (each with a gate, a check and a transcript) and docs
// documents, straight through the store: a long run in milliseconds.
func seedRun(tb testing.TB, ts *testServer, userID int64, iterations, docs int) string {
	tb.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("seed-%d-%d-%d", iterations, docs, time.Now().UnixNano())
	err := ts.DB.WriteTx(ctx, func(tx spec.Tx) error {
		run := &spec.Run{ID: id, UserID: userID, Objective: "A long run", Mode: "auto", Executor: "script",
			Config: json.RawMessage(`{"objective":"A long run","executor":"script","script":{"steps":[{}]}}`),
			Status: spec.StatusRunning, Iteration: iterations + 1, StartedAt: tx.Now()}
		run.Metrics.Iterations = iterations
		if err := tx.InsertRun(ctx, run); err != nil {
			return err
		}
		for i := 1; i <= iterations; i++ {
			it := &spec.Iteration{RunID: id, Iteration: i, Attempt: 1, Status: spec.IterSucceeded, StartedAt: tx.Now(), EndedAt: tx.Now(),
				Summary: fmt.Sprintf("Iteration %d read two more sources and updated the notes on the drivers.", i),
				Gate:    json.RawMessage(`{"decision":"continue","reasons":["work remains: compare licences"]}`),
				Checks:  json.RawMessage(`[{"name":"report exists","type":"document_exists","passed":false,"message":"report.md is missing"}]`)}
			if err := tx.UpsertIteration(ctx, it); err != nil {
				return err
			}
			if _, _, err := tx.AppendTranscript(ctx, id, i, 1<<20, []*spec.TranscriptLine{{Kind: "assistant", Text: "thinking"}}, 0); err != nil {
				return err
			}
		}
		for i := range docs {
			d := &spec.Document{RunID: id, Path: fmt.Sprintf("notes/%04d.md", i), Title: fmt.Sprintf("Note %d", i),
				Content: strings.Repeat("Some findings about SQLite drivers. ", 12)}
			if _, err := tx.PutDocument(ctx, d); err != nil {
				return err
			}
		}
		_, err := tx.AppendEvent(ctx, id, "run_started", nil)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

var (
	liveSrc   = regexp.MustCompile(`data-live-src="([^"]+)" data-live-on="([^"]+)"([^>]*)>`)
	iterAttrs = regexp.MustCompile(`data-iteration="(\d+)"`)
)

// livePart is a part of the run page that the page fetches again after
// the events it names.
type livePart struct {
	src string
	on  map[string]bool
}

// liveParts reads the live parts from a rendered run page and the URLs the
// page's script fetches for them (parts shown only in an open dialog are
// left out; an append-only list asks from its last item on).
func liveParts(page string) []livePart {
	var out []livePart
	for _, m := range liveSrc.FindAllStringSubmatch(page, -1) {
		if strings.Contains(m[3], "data-live-when-open") {
			continue
		}
		p := livePart{src: html.UnescapeString(m[1]), on: map[string]bool{}}
		if strings.Contains(m[3], "data-live-tail") {
			if its := iterAttrs.FindAllStringSubmatch(page, -1); len(its) > 0 {
				p.src += "?from=" + its[len(its)-1][1]
			}
		}
		for _, typ := range strings.Fields(m[2]) {
			p.on[typ] = true
		}
		out = append(out, p)
	}
	return out
}

// watchCost is what one event costs a page watching a run: the bytes of
// the fragments it fetches and the database statements they run.
func watchCost(tb testing.TB, ts *testServer, pc *pageClient, runID string, events []string) (bytes, queries float64) {
	tb.Helper()
	_, page := pc.get("/runs/" + runID)
	parts := liveParts(page)
	if len(parts) < 4 {
		tb.Fatalf("the page has %d live parts", len(parts))
	}
	var n, q int
	for _, typ := range events {
		before := ts.DB.ReadQueries()
		for _, p := range parts {
			if !p.on[typ] && !p.on["*"] {
				continue
			}
			resp, body := pc.get(p.src)
			if resp.StatusCode != http.StatusOK {
				tb.Fatalf("%s: %d", p.src, resp.StatusCode)
			}
			n += len(body)
		}
		q += int(ts.DB.ReadQueries() - before)
	}
	return float64(n) / float64(len(events)), float64(q) / float64(len(events))
}

// watchedEvents are the events a page sees while an iteration works, in
// a typical mix.
var watchedEvents = []string{"iteration_started", "llm_call", "iteration_cost_update", "tool_call", "tool_result", "transcript",
	"document_updated", "task_updated", "check_result", "gate_decision", "iteration_completed"}

func TestRunPageBytesDoNotGrowWithTheRun(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	ada, _ := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	short, long := seedRun(t, ts, ada.ID, 20, 10), seedRun(t, ts, ada.ID, 400, 10)
	_, a := pc.get("/runs/" + short)
	_, b := pc.get("/runs/" + long)
	t.Logf("run page: %d bytes at 20 iterations, %d at 400 (%.2f×)", len(a), len(b), float64(len(b))/float64(len(a)))
	if len(b) > 2*len(a) {
		t.Fatalf("the 400-iteration page is %d bytes, over twice the 20-iteration page's %d", len(b), len(a))
	}
	if !strings.Contains(b, "Show earlier iterations") || strings.Contains(b, `id="iteration-380"`) || !strings.Contains(b, `id="iteration-400"`) {
		t.Fatal("the long run's page does not show its latest iterations with Show earlier")
	}
	t.Run("Show earlier loads the iterations before, and the next button", func(t *testing.T) {
		_, rows := pc.get("/runs/" + long + "/timeline?before=381")
		if !strings.Contains(rows, `id="iteration-380"`) || !strings.Contains(rows, `id="iteration-361"`) || strings.Contains(rows, `id="iteration-360"`) ||
			!strings.Contains(rows, `timeline?before=361`) {
			t.Fatalf("earlier rows: %.600s", rows)
		}
	})
	t.Run("an event costs a watching page the same at 400 iterations", func(t *testing.T) {
		sb, sq := watchCost(t, ts, pc, short, watchedEvents)
		lb, lq := watchCost(t, ts, pc, long, watchedEvents)
		t.Logf("per event: %.0f bytes, %.1f queries at 20 iterations; %.0f bytes, %.1f queries at 400", sb, sq, lb, lq)
		if lb > 1.2*sb || lq > 1.2*sq {
			t.Fatalf("watching the long run costs %.0f bytes and %.1f queries per event against %.0f and %.1f", lb, lq, sb, sq)
		}
	})
}

// BenchmarkRunPageWatch measures what an event costs a page watching a
// 1,000-iteration run against a 10-iteration one (bytes fetched and
// database statements per event, and their ratio), and how long the run
// page of a 1,000-iteration run with 2,000 documents takes to render
// against a 10-iteration run with 10 documents.
func BenchmarkRunPageWatch(b *testing.B) {
	ts := newPageServer(b)
	pc := ts.signedIn(b, "ada@example.com")
	ada, _ := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	small, big := seedRun(b, ts, ada.ID, 10, 10), seedRun(b, ts, ada.ID, 1000, 10)
	huge := seedRun(b, ts, ada.ID, 1000, 2000)
	b.Run("per-event", func(b *testing.B) {
		var sb, sq, lb, lq float64
		for b.Loop() {
			sb, sq = watchCost(b, ts, pc, small, watchedEvents)
			lb, lq = watchCost(b, ts, pc, big, watchedEvents)
		}
		b.ReportMetric(lb/sb, "bytes-ratio")
		b.ReportMetric(lq/sq, "queries-ratio")
		b.Logf("per event: 10 iterations %.0f B %.1f queries; 1,000 iterations %.0f B %.1f queries; ratio bytes %.2f queries %.2f (target <= 1.2)",
			sb, sq, lb, lq, lb/sb, lq/sq)
	})
	render := func(id string) func(b *testing.B) {
		return func(b *testing.B) {
			var n int
			var q int64
			for b.Loop() {
				before := ts.DB.ReadQueries()
				_, page := pc.get("/runs/" + id)
				n, q = len(page), ts.DB.ReadQueries()-before
			}
			b.ReportMetric(float64(n), "page-bytes")
			b.ReportMetric(float64(q), "page-queries")
		}
	}
	b.Run("render-10-iterations-10-docs", render(small))
	b.Run("render-1000-iterations-2000-docs", render(huge))
}
