package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"homework/db/pg/pgtest"
	"homework/engine/spec"
	"homework/engine/waitfor"
)

// metric reads one unlabelled gauge or counter from the server's /metrics.
func (s *server) metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// rssBytes is the resident memory of process pid.
func rssBytes(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestStalledReadersAreLetGo: 20 clients open a run's stream or the
// dashboard feed and never read while the run emits 60,000 events. The
// server cuts every one of them (its writes to them time out) — all are
// gone within 30 s of the run's end — while a client that reads gets every
// event of the run, gap-free, and the server's memory grows by less than
// 200 MB.
func TestStalledReadersAreLetGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "hw.db")
	token := userAndToken(t, bin, dbPath)
	s := startServer(t, bin, dbPath, "--write-timeout", "10s")
	pid := s.cmd.Process.Pid
	baseRSS := rssBytes(t, pid)

	const steps, each = 6, 10_000
	var script []map[string]any
	for i := 1; i < steps; i++ {
		script = append(script, map[string]any{"summary": fmt.Sprint("step ", i), "emit": each,
			"status": map[string]any{"progress_summary": "emitting", "remaining_work": []string{"more"}}})
	}
	script = append(script, map[string]any{"summary": "done", "emit": each, "status": map[string]any{"exit_signal": true, "completion_evidence": []string{"emitted"}}})
	// The run's first iteration only waits, so every reader is connected
	// before it emits.
	runID := s.createRun(t, token, map[string]any{"objective": "emit many events", "executor": "script",
		"script":  map[string]any{"steps": append([]map[string]any{{"summary": "ready", "sleep_ms": 4000}}, script...)},
		"budgets": map[string]any{"max_iterations": steps + 2}})
	var stalled []net.Conn
	for i := range 20 {
		path := "/api/runs/" + runID + "/events?since_seq=0"
		if i%2 == 1 {
			path = "/api/events?since=0"
		}
		stalled = append(stalled, waitfor.StalledStream(t, s.base, token, path))
	}
	reader := s.openRunStream(t, token, runID, 0)
	pollUntil(t, "21 open streams", func() bool { return s.metric(t, "homework_sse_streams") == 21 })

	var peak int64
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		for {
			peak = max(peak, rssBytes(t, pid))
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	defer func() {
		if t.Failed() {
			t.Log(s.log())
		}
	}()
	got := reader.rest(t, s)
	ended := time.Now()
	for i, e := range got {
		if e.Seq != int64(i+1) {
			t.Fatalf("the reading client's event %d has seq %d: a gap or a duplicate", i+1, e.Seq)
		}
	}
	if n := len(got); n < steps*each || got[n-1].Type != spec.EventRunCompleted {
		t.Fatalf("the reading client got %d events ending with %s, want over %d ending with run_completed", n, got[n-1].Type, steps*each)
	}
	waitWithin(t, "every stalled stream cut", 30*time.Second, func() {
		pollUntil(t, "no open streams", func() bool { return s.metric(t, "homework_sse_streams") == 0 })
	})
	t.Logf("%d events; the stalled streams were all cut %v after the run ended", len(got), time.Since(ended).Round(100*time.Millisecond))
	close(stopSampling)
	sampling.Wait()
	grew := peak - baseRSS
	t.Logf("RSS %d MB at start, %d MB at peak", baseRSS>>20, peak>>20)
	if grew > 200<<20 {
		t.Errorf("the server's RSS grew by %d MB, want under 200 MB", grew>>20)
	}
	// The client side sees its connection closed: what the kernel still
	// holds drains, then EOF or a reset.
	for i, c := range stalled {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := io.Copy(io.Discard, c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("stalled reader %d: %v, want its connection closed by the server", i, err)
		}
	}
}

// pollUntil re-checks cond every 50 ms until it holds, for what the server
// shows only in its metrics (it publishes no event when a stream ends); a
// guard of a minute fails the test (a hung server, never the outcome).
func pollUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var logLineRE = regexp.MustCompile(`level=(WARN|ERROR) msg=("(?:[^"\\]|\\.)*"|\S+)(?:.*? component=(\S+))?`)

// TestAnOutageIsLoggedOnceWithACount: the database goes away for 7 s under
// a server with work in flight and clients asking; the log says so once
// per component and message in each 2 s interval, then with a count of
// what it held back — not a line per failure.
func TestAnOutageIsLoggedOnceWithACount(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	dbURL := pgtest.NewDatabase(t)
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	proxy, via := pgtest.NewProxy(t, dbURL)
	token := userAndToken(t, bin, dbURL)
	s := startServer(t, bin, via, "--log-repeats", "2s")
	var runs []string
	for range 3 {
		runs = append(runs, s.createRun(t, token, map[string]any{"objective": "work through an outage", "executor": "script",
			"script": slowScript(60, 200), "budgets": map[string]any{"max_iterations": 80}}))
	}
	for _, id := range runs {
		s.follow(t, token, id, func(typ spec.EventType) bool { return typ == spec.EventIterationCompleted })
	}

	before := len(s.log())
	proxy.Cut()
	// Clients keep asking: every answer is a failure the log could repeat.
	failures := 0
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); {
		req, _ := http.NewRequest("GET", s.base+"/api/runs", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			if resp.StatusCode >= 500 {
				failures++
			}
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond) // the last interval's counts are logged
	during := s.log()[before:]
	proxy.Mend()

	if failures < 50 {
		t.Fatalf("only %d failed requests during the outage; the test did not load the server", failures)
	}
	perKey := map[string]int{}
	total, summaries := 0, 0
	for _, l := range strings.Split(during, "\n") {
		m := logLineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		total++
		if strings.Contains(m[2], "more in the last 2s") {
			summaries++
			continue
		}
		perKey[m[3]+" "+m[2]]++
	}
	for k, n := range perKey {
		// 9.5 s of log at one line per 2 s interval, plus one for an
		// interval begun just before the cut.
		if n > 6 {
			t.Errorf("%q logged %d times in 9.5 s, want at most once per 2 s interval", k, n)
		}
	}
	if summaries == 0 {
		t.Errorf("no line says how many were held back:\n%s", during)
	}
	t.Logf("%d failed requests; %d warning and error lines during the outage (%d of them counts), %d kinds", failures, total, summaries, len(perKey))
	if total > 150 {
		t.Errorf("%d warning and error lines during a 7 s outage:\n%s", total, during)
	}
	// The server answers again once the database does.
	pollUntil(t, "the API answering after the outage", func() bool {
		req, _ := http.NewRequest("GET", s.base+"/api/runs", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
