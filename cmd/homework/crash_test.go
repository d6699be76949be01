package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"homework/db"
	"homework/engine/spec"
)

// binary builds the homework binary once per test process.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "homework-bin")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "homework")
	out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return path, nil
})

// server is a homework server running as a separate process.
type server struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}
	logs *bytes.Buffer
	mu   *sync.Mutex
}

var listenRE = regexp.MustCompile(`msg="homework listening" addr=(http://\S+)`)

// startServer starts `homework serve` on dbPath and waits until it listens.
func startServer(t testing.TB, bin, dbPath string, extra ...string) *server {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dbPath, "--script-executor", "--lease-ttl", "3s"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOMEWORK_LLM_BASE_URL=", "HOMEWORK_LLM_API_KEY=", "OPENAI_BASE_URL=", "OPENAI_API_KEY=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, done: make(chan struct{}), logs: &bytes.Buffer{}, mu: &sync.Mutex{}}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
	}()
	go func() { cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.kill() })
	select {
	case s.base = <-addr:
	case <-s.done:
		t.Fatalf("server exited before listening:\n%s", s.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not listen:\n%s", s.log())
	}
	return s
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

func (s *server) kill() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
}

func (s *server) api(t testing.TB, token, method, path string, body any, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.base+path, r)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

func userAndToken(t testing.TB, bin, dbPath string) string {
	t.Helper()
	add := exec.Command(bin, "user", "add", "--email", "crash@example.com", "--db", dbPath)
	add.Stdin = strings.NewReader("crash-test-password\n")
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("user add: %v %s", err, out)
	}
	out, err := exec.Command(bin, "token", "create", "--email", "crash@example.com", "--db", dbPath).Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// slowScript is a run of n iterations of ms each, completing at the last.
func slowScript(n int, ms int64) map[string]any {
	var steps []map[string]any
	for i := 1; i < n; i++ {
		steps = append(steps, map[string]any{"sleep_ms": ms, "summary": fmt.Sprint("step ", i), "tool_calls": 1,
			"status": map[string]any{"progress_summary": "working", "remaining_work": []string{"more"}},
			"llm":    []map[string]any{{"Role": "planner", "Model": "m", "PromptTokens": 10, "CompletionTokens": 5, "CostUSD": 0.001, "Priced": true}}})
	}
	steps = append(steps, map[string]any{"sleep_ms": ms, "summary": "done", "status": map[string]any{"exit_signal": true, "completion_evidence": []string{"finished"}}})
	return map[string]any{"steps": steps}
}

func TestCrashRecoveryAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "crash.db")
	first := startServer(t, bin, dbPath)
	token := userAndToken(t, bin, dbPath)

	var ids []string
	for i := 0; i < 3; i++ {
		var created struct {
			RunID string `json:"run_id"`
		}
		code := first.api(t, token, "POST", "/api/runs", map[string]any{
			"objective": fmt.Sprint("crash run ", i), "executor": "script", "script": slowScript(5, 400),
		}, &created)
		if code != 201 || created.RunID == "" {
			t.Fatalf("create run: %d", code)
		}
		ids = append(ids, created.RunID)
	}
	// Kill the server in the middle of the second iteration of the first run,
	// seen on the run's event stream. The first iteration takes 400 ms of
	// the second-long stretch a worker goes on with its run (the engine's
	// ContinueFor), so the second began in the transaction that finished
	// the first, leased to the killed process, with no job of its own.
	started := 0
	first.follow(t, token, ids[0], func(typ spec.EventType) bool {
		if typ == spec.EventIterationStarted {
			started++
		}
		return started == 2
	})
	first.kill()
	if n := iterateJobs(t, dbPath, ids[0]); n != 1 {
		t.Fatalf("the first run had %d iterate jobs when its second iteration began, want 1 (the second begun in place)", n)
	}

	second := startServer(t, bin, dbPath)
	for _, id := range ids {
		waitRunStatus(t, second, token, id, "completed")
	}
	for _, id := range ids {
		var page struct {
			Events []struct {
				Seq  int64           `json:"seq"`
				Type spec.EventType  `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"events"`
		}
		if code := second.api(t, token, "GET", "/api/runs/"+id+"/events?limit=1000", nil, &page); code != 200 {
			t.Fatalf("events: %d", code)
		}
		interrupted := 0
		for i, e := range page.Events {
			if e.Seq != int64(i+1) {
				t.Fatalf("run %s: event %d has seq %d (not gap-free)", id, i+1, e.Seq)
			}
			if e.Type == "iteration_completed" && strings.Contains(string(e.Data), `"interrupted"`) {
				interrupted++
			}
		}
		var run struct {
			Metrics struct {
				Iterations  int     `json:"iterations"`
				TokensTotal int64   `json:"tokens_total"`
				Cost        float64 `json:"cost_total_usd"`
				ToolCalls   int     `json:"tool_calls_total"`
				RunningMS   int64   `json:"running_ms"`
			} `json:"metrics"`
			Iterations []struct {
				Iteration int    `json:"iteration"`
				Status    string `json:"status"`
				Metrics   struct {
					Iterations  int     `json:"iterations"`
					TokensTotal int64   `json:"tokens_total"`
					Cost        float64 `json:"cost_total_usd"`
					ToolCalls   int     `json:"tool_calls_total"`
					RunningMS   int64   `json:"running_ms"`
				} `json:"metrics"`
			} `json:"iterations"`
		}
		if code := second.api(t, token, "GET", "/api/runs/"+id+"?include=iterations", nil, &run); code != 200 {
			t.Fatalf("run: %d", code)
		}
		seen := map[int]bool{}
		var iters, tokens, tools int64
		var running int64
		var cost float64
		for _, it := range run.Iterations {
			if seen[it.Iteration] {
				t.Fatalf("iteration %d recorded twice", it.Iteration)
			}
			seen[it.Iteration] = true
			if it.Status != "succeeded" {
				t.Fatalf("iteration %d ended %s", it.Iteration, it.Status)
			}
			iters += int64(it.Metrics.Iterations)
			tokens += it.Metrics.TokensTotal
			tools += int64(it.Metrics.ToolCalls)
			running += it.Metrics.RunningMS
			cost += it.Metrics.Cost
		}
		if len(run.Iterations) != 5 || run.Metrics.Iterations != 5 || iters != 5 || run.Metrics.TokensTotal != tokens ||
			int64(run.Metrics.ToolCalls) != tools || run.Metrics.RunningMS != running || !closeTo(run.Metrics.Cost, cost) {
			t.Fatalf("run %s metrics %+v do not add up over %d iterations", id, run.Metrics, len(run.Iterations))
		}
		if id == ids[0] && interrupted == 0 {
			t.Fatalf("the killed iteration was not recorded as interrupted")
		}
	}
}

func closeTo(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// iterateJobs counts the run's iterate jobs, whatever their state, in the
// SQLite database at path (its server stopped).
func iterateJobs(t testing.TB, path, runID string) int {
	t.Helper()
	conn, err := sql.Open("sqlite", db.WriterDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if err := conn.QueryRow(`SELECT COUNT(*) FROM river_job WHERE kind = 'iterate' AND args ->> 'run_id' = ?`, runID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitRunStatus follows the run's event stream until the event that moves
// it into status (run_completed for completed, and so on).
func waitRunStatus(t testing.TB, s *server, token, id, status string) {
	t.Helper()
	want := spec.StatusEvent(status)
	if want == "" {
		t.Fatalf("status %s has no event to wait for", status)
	}
	s.follow(t, token, id, func(typ spec.EventType) bool { return typ == want })
}

// follow reads the run's event stream from the start (server-sent events)
// and calls until with each event's type until it returns true. It fails t
// when the stream ends first (a run's stream ends after its terminal event)
// or when no event comes for a minute, a guard against a hung server.
func (s *server) follow(t testing.TB, token, runID string, until func(typ spec.EventType) bool) {
	t.Helper()
	rs := s.openRunStream(t, token, runID, 0)
	defer rs.cancel()
	rs.until(t, s, "the awaited event", func(e apiEvent) bool { return until(e.Type) })
}

// feedEvent is one event of the user feed, as much of it as tests read.
type feedEvent struct {
	ID    int64          `json:"id"`
	RunID string         `json:"run_id"`
	Seq   int64          `json:"seq"`
	Type  spec.EventType `json:"type"`
	Data  struct {
		Iteration int `json:"iteration"`
		Attempt   int `json:"attempt"`
	} `json:"data"`
}

// feed reads the user's event feed (GET /api/events as server-sent events)
// from the start and calls until with each event until it returns true. It
// fails t when the stream ends first or after a minute.
func (s *server) feed(t testing.TB, token string, until func(feedEvent) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/api/events?since_id=0", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("user feed: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("user feed: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e feedEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("user feed event %q: %v", data, err)
		}
		if until(e) {
			return
		}
	}
	t.Fatalf("the user feed ended (%v):\n%s", sc.Err(), s.log())
}

// BenchmarkRestartToFirstResumedIteration measures the time from starting a
// server after a SIGKILL with 20 runs in flight to the first resumed
// iteration (target under 2 s).
//
//	go test ./cmd/homework -run '^$' -bench RestartToFirstResumed -benchtime 1x
func BenchmarkRestartToFirstResumedIteration(b *testing.B) {
	bin, err := binary()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		dbPath := filepath.Join(b.TempDir(), "bench.db")
		first := startServer(b, bin, dbPath, "--max-runs-per-user", "20", "--workers", "20")
		token := userAndToken(b, bin, dbPath)
		for r := 0; r < 20; r++ {
			if code := first.api(b, token, "POST", "/api/runs", map[string]any{"objective": fmt.Sprint("r", r), "executor": "script",
				"script": slowScript(3, 5000)}, nil); code != 201 {
				b.Fatalf("create: %d", code)
			}
		}
		// Every run's first iteration is running once its iteration_started
		// is on the user feed (it commits with the running row).
		started := map[string]bool{}
		first.feed(b, token, func(e feedEvent) bool {
			if e.Type == spec.EventIterationStarted {
				started[e.RunID] = true
			}
			return len(started) == 20
		})
		first.kill()
		b.StartTimer()
		start := time.Now()
		second := startServer(b, bin, dbPath, "--max-runs-per-user", "20", "--workers", "20")
		resumed := 0
		second.feed(b, token, func(e feedEvent) bool {
			if e.Type == spec.EventIterationStarted && e.Data.Attempt == 2 {
				resumed++
			}
			return resumed > 0
		})
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(elapsed.Seconds()*1000, "ms-to-first-resumed")
		b.Logf("restart to first resumed iteration: %s (20 runs in flight)", elapsed)
		second.kill()
	}
}
