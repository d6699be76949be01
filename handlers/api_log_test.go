package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

// seedLogRun stores a finished run straight through the store: iterations
// iterations, each with records output chunks of "iteration N line K\n"
// (the first coloured) and, in the last, a progress line redrawn with
// carriage returns over chunks that straddle a page of the store.
func seedLogRun(t *testing.T, ts *testServer, userID int64, iterations, records int) string {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("log-%d", time.Now().UnixNano())
	err := ts.Store.WriteTx(ctx, func(tx spec.Tx) error {
		run := &spec.Run{ID: id, UserID: userID, Objective: "Print a lot\nover lines", Mode: "auto", Executor: "script",
			Config: json.RawMessage(`{"objective":"Print a lot","executor":"script","script":{"steps":[{}]}}`),
			Status: spec.StatusCompleted, Iteration: iterations, StartedAt: tx.Now(), CompletedAt: tx.Now()}
		run.Metrics.Iterations = iterations
		if err := tx.InsertRun(ctx, run); err != nil {
			return err
		}
		for i := 1; i <= iterations; i++ {
			it := &spec.Iteration{RunID: id, Iteration: i, Attempt: 1, Status: spec.IterSucceeded, StartedAt: tx.Now(),
				EndedAt: tx.Now().Add(1500 * time.Millisecond), Gate: json.RawMessage(`{"decision":"continue","reasons":["more"]}`)}
			if err := tx.UpsertIteration(ctx, it); err != nil {
				return err
			}
			lines := []*spec.TranscriptLine{{Kind: spec.TranscriptPrompt, Text: "Do <it> & tell me"}}
			for k := 1; k <= records; k++ {
				text := fmt.Sprintf("iteration %d line %d\n", i, k)
				if k == 1 {
					text = "\x1b[1;31m" + text + "\x1b[0m"
				}
				lines = append(lines, &spec.TranscriptLine{Kind: spec.TranscriptOutput, Name: "stdout", Text: text})
			}
			if i == iterations {
				for p := 0; p <= 100; p += 10 {
					lines = append(lines, &spec.TranscriptLine{Kind: spec.TranscriptOutput, Name: "stdout", Text: fmt.Sprintf("\rprogress %3d%%", p)})
				}
				lines = append(lines, &spec.TranscriptLine{Kind: spec.TranscriptOutput, Name: "stdout", Text: "\n"})
			}
			if _, _, err := tx.AppendTranscript(ctx, id, i, 8<<20, lines, 0); err != nil {
				return err
			}
		}
		_, err := tx.AppendEvent(ctx, id, "run_completed", nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRunLogDownload reads GET /api/runs/{id}/log: every iteration under
// its header, every record in order though the transcripts span several
// pages of the store, as a terminal shows it; one iteration with
// ?iteration=; another user's run is 404.
func TestRunLogDownload(t *testing.T) {
	if onBothStores(t, TestRunLogDownload) {
		return
	}
	ts := newTestServer(t, nil)
	alice, bob := ts.user(t, "alice@example.com"), ts.user(t, "bob@example.com")
	const iterations, records = 3, 1203 // over two pages of 500 records each
	id := seedLogRun(t, ts, alice.ID, iterations, records)

	resp, body := ts.request(t, alice, "GET", "/api/runs/"+id+"/log", nil)
	log := string(body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("GET log: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	t.Run("every iteration has a header with its number, start, duration and outcome", func(t *testing.T) {
		headers := regexp.MustCompile(`(?m)^=== Iteration (\d+) · started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · took 1\.5s · succeeded, gate: continue ===$`).FindAllStringSubmatch(log, -1)
		if len(headers) != iterations {
			t.Fatalf("%d iteration headers, want %d:\n%.2000s", len(headers), iterations, log)
		}
		for i, h := range headers {
			if h[1] != fmt.Sprint(i+1) {
				t.Fatalf("header %d is iteration %s", i+1, h[1])
			}
		}
		if !strings.HasPrefix(log, "# Run "+id+": Print a lot\n# completed · 3 iterations\n") {
			t.Fatalf("the log starts %q", log[:min(len(log), 200)])
		}
	})
	t.Run("every record is there once, in order", func(t *testing.T) {
		at := 0
		for i := 1; i <= iterations; i++ {
			for k := 1; k <= records; k++ {
				line := fmt.Sprintf("\niteration %d line %d\n", i, k)
				n := strings.Index(log[at:], line)
				if n < 0 {
					t.Fatalf("%q missing or out of order", strings.TrimSpace(line))
				}
				at += n + 1
			}
		}
		if c := strings.Count(log, "iteration 2 line 700\n"); c != 1 {
			t.Fatalf("iteration 2 line 700 is there %d times", c)
		}
	})
	t.Run("colours and carriage returns are interpreted, never printed", func(t *testing.T) {
		if strings.Contains(log, "\x1b") || strings.Contains(log, "[1;31m") || strings.Contains(log, "\r") {
			t.Fatalf("escape sequences or carriage returns in the log: %q", log[:min(len(log), 400)])
		}
		// The progress line straddles a page of the store: one line, as a
		// terminal leaves it.
		if !strings.Contains(log, "\nprogress 100%\n") || strings.Contains(log, "progress  90%") {
			t.Fatalf("the progress line is not the terminal's last state: %q", log[max(0, len(log)-300):])
		}
		expectContains(t, log, "] prompt\n    Do <it> & tell me\n", "] output stdout\n")
		// One head for an output stream's run of chunks, as on the page.
		if n := strings.Count(log, "] output stdout\n"); n != iterations {
			t.Fatalf("%d output heads, want one per iteration", n)
		}
	})
	t.Run("one iteration with ?iteration=", func(t *testing.T) {
		resp, body := ts.request(t, alice, "GET", "/api/runs/"+id+"/log?iteration=2", nil)
		one := string(body)
		if resp.StatusCode != http.StatusOK || strings.Count(one, "=== Iteration") != 1 || !strings.Contains(one, "=== Iteration 2 ·") ||
			!strings.Contains(one, "iteration 2 line 1203\n") || strings.Contains(one, "iteration 1 line") || strings.Contains(one, "iteration 3 line") {
			t.Fatalf("iteration 2's log: %d %.300s", resp.StatusCode, one)
		}
		ts.expectError(t, alice, "GET", "/api/runs/"+id+"/log?iteration=9", nil, http.StatusNotFound, spec.ENOTFOUND, "")
		ts.expectError(t, alice, "GET", "/api/runs/"+id+"/log?iteration=0", nil, http.StatusBadRequest, spec.EINVALID, "iteration")
	})
	t.Run("another user's run is 404, as JSON", func(t *testing.T) {
		ts.expectError(t, bob, "GET", "/api/runs/"+id+"/log", nil, http.StatusNotFound, spec.ENOTFOUND, "")
		ts.expectError(t, bob, "GET", "/api/runs/"+id+"/log?iteration=1", nil, http.StatusNotFound, spec.ENOTFOUND, "")
	})
}

// TestRunLogOfALiveRun downloads the log of a scripted run as it ran: the
// agent's colours interpreted, the iteration that asked its question and
// the one after the answer each under its header.
func TestRunLogOfALiveRun(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	ask := askStep("Which colour?")
	ask.Stream = "\x1b[32mok\x1b[0m asking\n"
	done := doneStep("done")
	done.Stream = "\x1b[38;5;196mfinished\x1b[0m\n"
	id := ts.createRun(t, alice, ask, done)
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	ts.expect(t, alice, "POST", "/api/runs/"+id+"/respond", map[string]any{"answers": []string{"green"}}, http.StatusOK, nil)
	ts.waitStatus(t, alice, id, spec.StatusCompleted)
	_, body := ts.request(t, alice, "GET", "/api/runs/"+id+"/log", nil)
	log := string(body)
	expectContains(t, log, "=== Iteration 1 ·", "gate: wait ===", "ok asking\n", "=== Iteration 2 ·", "gate: complete ===", "finished\n")
	expectLacks(t, log, "\x1b", "[32m")
}
