package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"homework/engine/spec"
)

// testMain starts the whole server (Main) on a loopback port with the
// scripted executor and returns it with an API token for a new user.
func testMain(t *testing.T) (*Main, string) {
	t.Helper()
	cfg := &Config{Addr: "127.0.0.1:0", DBPath: filepath.Join(t.TempDir(), "hw.db"), Workers: 2, MaxRunsPerUser: 3,
		ScriptExecutor: true, InsecureCookies: true, ShutdownTimeout: 10 * time.Second, LeaseTTL: 15 * time.Second}
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	u, err := m.Store.CreateUser(context.Background(), "tail@example.com", "x", false)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := m.Store.CreateAPIToken(context.Background(), u.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// api sends a JSON request to the server and decodes the answer into out.
func api(t *testing.T, m *Main, token, method, path, body string, want int, out any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+m.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
}

const askThenDone = `{"objective":"tail me","executor":"script","script":{"steps":[
	{"summary":"asking","status":{"needs_user_input":true,"blocking_questions":["which?"],"progress_summary":"asking"}},
	{"summary":"done","status":{"exit_signal":true,"completion_evidence":["did it"],"progress_summary":"done"},
	 "llm":[{"role":"executor","model":"gpt-test","PromptTokens":100,"CompletionTokens":20,"CostUSD":0.25,"Priced":true}]}]}}`

func createRun(t *testing.T, m *Main, token, body string) string {
	t.Helper()
	var out struct {
		RunID string `json:"run_id"`
	}
	api(t, m, token, "POST", "/api/runs", body, 201, &out)
	return out.RunID
}

// waitStatus waits on the bus until the run has status.
func waitStatus(t *testing.T, m *Main, runID, status string) {
	t.Helper()
	sub := m.Bus.SubscribeRun(runID, 1024)
	defer func() { sub.Close() }()
	deadline := time.After(20 * time.Second)
	for {
		r, err := m.Store.FindRunByID(context.Background(), runID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == status {
			return
		}
		select {
		case _, ok := <-sub.C:
			if !ok {
				sub = m.Bus.SubscribeRun(runID, 1024)
			}
		case <-deadline:
			t.Fatalf("run %s is %s, want %s", runID, r.Status, status)
		}
	}
}

// lines is an io.Writer that collects output and signals each write.
type lines struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{}
}

func newLines() *lines { return &lines{notify: make(chan struct{}, 1)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	select {
	case l.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the output contains s.
func (l *lines) waitFor(t *testing.T, s string, exited <-chan int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(l.String(), s) {
		select {
		case <-l.notify:
		case code := <-exited:
			t.Fatalf("tail exited with %d before printing %q:\n%s", code, s, l.String())
		case <-deadline:
			t.Fatalf("timed out waiting for %q in:\n%s", s, l.String())
		}
	}
}

// proxy forwards connections to target and can cut them all.
type proxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.accepted.Add(1)
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer p.wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		waitWithin(t, "the proxy's connections to close", 10*time.Second, p.wg.Wait)
	})
	return p
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestTailFollowsRunAcrossDrop(t *testing.T) {
	m, token := testMain(t)
	id := createRun(t, m, token, askThenDone)
	waitStatus(t, m, id, spec.StatusWaiting)
	px := newProxy(t, m.Addr())

	out, errOut := newLines(), newLines()
	exited := make(chan int, 1)
	env := func(k string) string {
		return map[string]string{"HOMEWORK_TOKEN": token, "HOMEWORK_SERVER": "http://" + px.ln.Addr().String()}[k]
	}
	go func() { exited <- run(context.Background(), []string{"tail", id}, env, nil, out, errOut) }()

	out.waitFor(t, "run_waiting_on_user", exited)
	px.cut()
	api(t, m, token, "POST", "/api/runs/"+id+"/respond", `{"answer":"modernc"}`, 200, nil)
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("exit %d; stderr %s; stdout:\n%s", code, errOut.String(), out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("tail did not exit:\n%s", out.String())
	}
	got := out.String()
	for _, want := range []string{"following run " + id, "run_started", "gate_decision", "decision wait", "run_completed",
		"cost so far $0.2500", "user_response"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// Running totals: the first iteration (before any model call) shows
	// zero, not the run's final cost.
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, " iteration_completed ") && strings.Contains(l, "iteration 1 ") && !strings.Contains(l, "cost so far $0.0000") {
			t.Errorf("iteration 1 shows later totals: %q", l)
		}
	}
	if n := strings.Count(got, " run_completed "); n != 1 {
		t.Errorf("run_completed printed %d times:\n%s", n, got)
	}
	if px.accepted.Load() < 2 { // the first stream (sharing the lookup's connection), then the reconnect
		t.Errorf("only %d connections: the drop was not exercised", px.accepted.Load())
	}
}

func TestTailFinishedRun(t *testing.T) {
	m, token := testMain(t)
	id := createRun(t, m, token, `{"objective":"x","executor":"script","script":{"steps":[{"status":{"exit_signal":true,"completion_evidence":["ok"]}}]}}`)
	waitStatus(t, m, id, spec.StatusCompleted)
	last, err := m.Store.LastSeq(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	server := "http://" + m.Addr()

	t.Run("from the start it prints the history and exits 0", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"tail", id, "--server", server, "--token", token}, func(string) string { return "" }, nil, &out, &errOut)
		if code != 0 || !strings.Contains(out.String(), "run_completed") {
			t.Fatalf("exit %d, stderr %s, stdout:\n%s", code, errOut.String(), out.String())
		}
	})
	t.Run("past the end it prints the final status and exits 0", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"tail", "--since", itoa(last), "--server", server, "--token", token, id},
			func(string) string { return "" }, nil, &out, &errOut)
		if code != 0 || !strings.Contains(out.String(), "is completed") {
			t.Fatalf("exit %d, stderr %s, stdout:\n%s", code, errOut.String(), out.String())
		}
	})
}

func TestTailErrors(t *testing.T) {
	m, token := testMain(t)
	server := "http://" + m.Addr()
	none := func(string) string { return "" }
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"an unknown run is a clear error", []string{"tail", "nope", "--server", server, "--token", token}, 1, "not found"},
		{"a refused token is a clear error", []string{"tail", "nope", "--server", server, "--token", "hw_bad"}, 1, "refused the token"},
		{"no token is a usage error", []string{"tail", "x", "--server", server}, 2, "HOMEWORK_TOKEN"},
		{"no run id is a usage error", []string{"tail", "--token", token}, 2, "RUN_ID"},
		{"a negative --since is a usage error", []string{"tail", "x", "--since", "-1", "--token", token}, 2, "--since"},
		{"a bad server URL is a usage error", []string{"tail", "x", "--server", "ftp://x", "--token", token}, 2, "--server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, none, nil, &out, &errOut)
			if code != tc.code || !strings.Contains(errOut.String(), tc.msg) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut.String(), tc.code, tc.msg)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
