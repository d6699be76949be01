package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// stop sends SIGTERM and waits for the server to exit: after it, every
// attempt it had in flight has returned and written what it was going to.
func (s *server) stop(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(streamGuard):
		t.Fatalf("the server did not exit after SIGTERM:\n%s", s.log())
	}
}

// createRun creates a run through the API and returns its id.
func (s *server) createRun(t testing.TB, token string, body map[string]any) string {
	t.Helper()
	var created struct {
		RunID string `json:"run_id"`
	}
	if code := s.api(t, token, "POST", "/api/runs", body, &created); code != 201 || created.RunID == "" {
		t.Fatalf("create run: %d", code)
	}
	return created.RunID
}

// runRecord is what must not change once a run has ended: its status,
// stop reason, metrics, iterations and events.
type runRecord struct {
	Run        json.RawMessage
	Iterations []struct {
		Iteration int          `json:"iteration"`
		Status    string       `json:"status"`
		Metrics   spec.Metrics `json:"metrics"`
	}
	Events []apiEvent
}

// record reads the run's record through the API, checking its events are
// gap-free and end with an event of type last.
func (s *server) record(t testing.TB, token, runID string, last spec.EventType) runRecord {
	t.Helper()
	var full struct {
		Status     string           `json:"status"`
		StopReason *spec.StopReason `json:"stop_reason"`
		Metrics    json.RawMessage  `json:"metrics"`
		Iteration  int              `json:"iteration"`
		Report     json.RawMessage  `json:"report"`
		Iterations json.RawMessage  `json:"iterations"`
	}
	if code := s.api(t, token, "GET", "/api/runs/"+runID+"?include=iterations", nil, &full); code != 200 {
		t.Fatalf("run: %d", code)
	}
	var rec runRecord
	if err := json.Unmarshal(full.Iterations, &rec.Iterations); err != nil {
		t.Fatal(err)
	}
	full.Iterations = nil
	rec.Run, _ = json.Marshal(full)
	rec.Events = runEvents(t, s, token, runID)
	if n := len(rec.Events); n == 0 || rec.Events[n-1].Type != last {
		t.Fatalf("the run's last event is not %s: %s", last, eventTypes(rec.Events))
	}
	return rec
}

// TestCancelDuringAnIterationThroughTheBinary: a cancel while an iteration
// works (in the executor, or in a command check after the agent exited)
// ends the run's stream with run_canceled, its last event; seq is
// gap-free; and nothing of the record changes afterwards, not when the
// canceled attempt returns nor when the server stops and starts again.
func TestCancelDuringAnIterationThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	wd := filepath.Join(root, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		run   map[string]any
		ready spec.EventType // the event after which the iteration is busy
	}{
		{"in the executor", map[string]any{"objective": "cancel me in the executor", "executor": "script",
			"script": slowScript(3, 120_000)}, spec.EventIterationStarted},
		{"in a command check", map[string]any{"objective": "cancel me in a check", "executor": "command",
			"agent": map[string]any{"workdir": wd, "argv": []string{"sh", "-c", "echo 'done <promise>COMPLETE</promise>'"}},
			"completion": map[string]any{"checks": []map[string]any{{"type": "command", "name": "slow check",
				"argv": []string{"sh", "-c", "sleep 120"}, "timeout_ms": 300_000}}}}, spec.EventAgentExit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbPath := filepath.Join(t.TempDir(), "cancel.db")
			args := []string{"--allow-command-runs", root}
			s := startServer(t, bin, dbPath, args...)
			token := adminToken(t, bin, dbPath)
			runID := s.createRun(t, token, tc.run)
			stream := s.openRunStream(t, token, runID, 0)
			stream.until(t, s, string(tc.ready), isType(tc.ready))
			if code := s.api(t, token, "POST", "/api/runs/"+runID+"/cancel", nil, nil); code != 200 {
				t.Fatalf("cancel: %d", code)
			}
			rest := stream.rest(t, s)
			if len(rest) == 0 || rest[len(rest)-1].Type != spec.EventRunCanceled {
				t.Fatalf("the stream did not end with run_canceled: %s", eventTypes(stream.seen))
			}
			atCancel := s.record(t, token, runID, spec.EventRunCanceled)

			// Let the canceled attempt return, whatever it was doing: the
			// server exits only after its in-flight attempts have.
			s.stop(t)
			again := startServer(t, bin, dbPath, args...)
			after := again.record(t, token, runID, spec.EventRunCanceled)
			if !bytes.Equal(atCancel.Run, after.Run) {
				t.Fatalf("the run changed after its cancel:\nat cancel %s\nafter     %s", atCancel.Run, after.Run)
			}
			if eventTypes(atCancel.Events) != eventTypes(after.Events) {
				t.Fatalf("events were added after the cancel:\nat cancel %s\nafter     %s", eventTypes(atCancel.Events), eventTypes(after.Events))
			}
			if len(after.Iterations) != 1 || after.Iterations[0].Status != spec.IterCanceled {
				t.Fatalf("iterations after the cancel: %+v", after.Iterations)
			}
		})
	}
}

// llmServer starts the binary against a scripted model endpoint.
func llmServer(t *testing.T, bin, dbPath string, endpoint *llmtest.Server, extra ...string) *server {
	t.Helper()
	return startServer(t, bin, dbPath, append([]string{"--llm-base-url", endpoint.URL, "--llm-api-key", "test", "--llm-model", "gpt-4o-mini"}, extra...)...)
}

// isSummarizer tells the summarizer's requests from the planner's.
func isSummarizer(r llmtest.Request) bool {
	return strings.HasPrefix(r.System(), "You write the narrative summary")
}

// TestA429StormThroughTheBinary: an endpoint answering every call with 429
// and Retry-After stops the run as rate_limited, naming the status and the
// endpoint's message; the iterations back off, the retries wait out
// Retry-After, and the endpoint sees a bounded number of requests, none
// of them the summarizer's.
func TestA429StormThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	const retryAfter = time.Second
	endpoint := llmtest.New(t)
	endpoint.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		return llmtest.Reply{Status: 429, Content: "quota exceeded for this minute", Header: map[string]string{"Retry-After": "1"}}, true
	})
	dbPath := filepath.Join(t.TempDir(), "storm.db")
	s := llmServer(t, bin, dbPath, endpoint)
	token := userAndToken(t, bin, dbPath)
	runID := s.createRun(t, token, map[string]any{"objective": "write a report while the endpoint refuses", "executor": "llm",
		"breakers": map[string]any{"no_progress": 2}})
	// A stopped run may be continued: its stream stays open.
	s.openRunStream(t, token, runID, 0).until(t, s, "run_stopped", isType(spec.EventRunStopped))
	rec := s.record(t, token, runID, spec.EventRunStopped)
	var run struct {
		StopReason *spec.StopReason `json:"stop_reason"`
	}
	json.Unmarshal(rec.Run, &run)
	if run.StopReason == nil || run.StopReason.Type != spec.StopRateLimited {
		t.Fatalf("stop reason %+v, want rate_limited", run.StopReason)
	}
	if d := run.StopReason.Detail; !strings.Contains(d, "429") || !strings.Contains(d, "quota exceeded for this minute") {
		t.Fatalf("the stop reason does not name the status and message: %q", d)
	}

	iterations, backoffs := 0, 0
	for _, e := range rec.Events {
		switch e.Type {
		case spec.EventIterationStarted:
			iterations++
		case spec.EventIterationBackoff:
			backoffs++
			var d struct {
				DelayMS int64 `json:"delay_ms"`
			}
			json.Unmarshal(e.Data, &d)
			if time.Duration(d.DelayMS)*time.Millisecond < retryAfter {
				t.Errorf("an iteration backoff of %d ms is shorter than Retry-After (%s)", d.DelayMS, retryAfter)
			}
		}
	}
	if iterations < 2 || backoffs != iterations-1 {
		t.Fatalf("%d iterations, %d backoffs: every iteration after a failed one backs off (%s)", iterations, backoffs, eventTypes(rec.Events))
	}

	// Not hammered: at most the client's retries (3 by default) after each
	// iteration's first call, each waiting out Retry-After.
	reqs := endpoint.Requests()
	for _, r := range reqs {
		if isSummarizer(r) {
			t.Fatalf("the summarizer was called against the failing endpoint")
		}
	}
	if max := iterations * (1 + 3); len(reqs) > max || len(reqs) < iterations {
		t.Fatalf("%d requests for %d iterations (at most %d)", len(reqs), iterations, max)
	}
	for i := 1; i < len(reqs); i++ {
		if gap := reqs[i].At.Sub(reqs[i-1].At); gap < retryAfter {
			t.Errorf("request %d came %s after the previous 429, sooner than its Retry-After (%s)", i+1, gap, retryAfter)
		}
	}
	t.Logf("%d iterations, %d requests over %s", iterations, len(reqs), reqs[len(reqs)-1].At.Sub(reqs[0].At).Round(time.Millisecond))
}

// TestASlowSummarizerUnderAShortLeaseThroughTheBinary: a summarizer that
// answers after three lease lengths does not get the iteration recovered
// and run again: the planner is asked once per scripted reply, the run
// completes with one attempt and the summary the slow summarizer wrote.
func TestASlowSummarizerUnderAShortLeaseThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	const lease = time.Second
	endpoint := llmtest.New(t,
		llmtest.Tools(llmtest.ToolCall("workspace_write", map[string]any{"path": "report.md", "content": "# Report\n\nDone."})),
		llmtest.Tools(llmtest.ToolCall("report_status", map[string]any{"exit_signal": true, "progress_summary": "Wrote the report.",
			"confidence": "high", "completion_evidence": []string{"report.md is written"}})),
	)
	endpoint.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if !isSummarizer(r) {
			return llmtest.Reply{}, false
		}
		// The fault: the summarizer outlasts the lease three times over.
		return llmtest.Reply{Content: "The run wrote report.md.", Delay: 3 * lease}, true
	})
	dbPath := filepath.Join(t.TempDir(), "summarizer.db")
	s := llmServer(t, bin, dbPath, endpoint, "--lease-ttl", lease.String())
	token := userAndToken(t, bin, dbPath)
	runID := s.createRun(t, token, map[string]any{"objective": "write report.md", "executor": "llm"})
	stream := s.openRunStream(t, token, runID, 0)
	if rest := stream.rest(t, s); len(rest) == 0 || rest[len(rest)-1].Type != spec.EventRunCompleted {
		t.Fatalf("the run did not complete: %s\n%s", eventTypes(stream.seen), s.log())
	}
	rec := s.record(t, token, runID, spec.EventRunCompleted)
	types := eventTypes(rec.Events)
	if n := strings.Count(types, string(spec.EventIterationStarted)); n != 1 || strings.Contains(types, string(spec.EventRunRecovered)) {
		t.Fatalf("the iteration was started %d times (recovered while the summarizer ran?): %s", n, types)
	}
	if len(rec.Iterations) != 1 || rec.Iterations[0].Status != spec.IterSucceeded {
		t.Fatalf("iterations: %+v", rec.Iterations)
	}
	summarizer, planner := 0, 0
	for _, r := range endpoint.Requests() {
		if isSummarizer(r) {
			summarizer++
		} else {
			planner++
		}
	}
	if planner != 2 || summarizer != 1 || endpoint.Remaining() != 0 || endpoint.Unscripted() != 0 {
		t.Fatalf("planner asked %d times (want 2), summarizer %d (want 1); %d replies left, %d unscripted",
			planner, summarizer, endpoint.Remaining(), endpoint.Unscripted())
	}
	var run struct {
		Report spec.Report `json:"report"`
	}
	if err := json.Unmarshal(rec.Run, &run); err != nil || run.Report.Summary != "The run wrote report.md." {
		t.Fatalf("the report's summary is not the slow summarizer's: %q (%v)", run.Report.Summary, err)
	}
}
