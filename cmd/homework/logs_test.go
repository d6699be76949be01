package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log sink the server's goroutines write to at once.
type lockedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed and replaced at every write
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
	}
	b.written = make(chan struct{})
	return b.buf.Write(p)
}

// waitFor waits until the log holds s, woken by each write, for up to
// timeout (a hang guard).
func (b *lockedBuffer) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		b.mu.Lock()
		found := strings.Contains(b.buf.String(), s)
		if b.written == nil {
			b.written = make(chan struct{})
		}
		written := b.written
		b.mu.Unlock()
		if found {
			return
		}
		select {
		case <-written:
		case <-deadline:
			t.Fatalf("the log never held %s", s)
		}
	}
}

// lines returns the JSON log records written so far.
func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a log line is not JSON: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestLogsRequestsAndRunLifecycleInJSON(t *testing.T) {
	sink := &lockedBuffer{}
	cfg, err := parseServeConfig([]string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "h.db"), "--script-executor",
		"--insecure-cookies", "--log-format", "json"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMain(cfg, newLogger(sink, cfg))
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	u, err := m.Store.CreateUser(context.Background(), "log@example.com", "x", false)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := m.Store.CreateAPIToken(context.Background(), u.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	id := createRun(t, m, token, askThenDone)
	waitStatus(t, m, id, "waiting_on_user")
	api(t, m, token, "POST", "/api/runs/"+id+"/respond", `{"answers":["modernc"]}`, 200, nil)
	waitStatus(t, m, id, "completed")
	api(t, m, token, "GET", "/api/runs?status=completed&q=secret-in-query", "", 200, nil)
	api(t, m, token, "GET", "/api/runs/nope", "", 404, nil)

	// The completion is logged after its commit, which the bus saw first.
	sink.waitFor(t, `"msg":"run completed"`, 10*time.Second)
	var requests, lifecycle []map[string]any
	for _, l := range sink.lines(t) {
		switch {
		case l["msg"] == "request":
			requests = append(requests, l)
		case l["run"] == id:
			lifecycle = append(lifecycle, l)
		}
		if l["component"] == "river" && l["level"] == "INFO" {
			t.Errorf("River logs at info: %v", l)
		}
	}
	text := sink.String()
	for _, secret := range []string{token, "Bearer", "secret-in-query", "modernc", "tail me"} {
		if strings.Contains(text, secret) {
			t.Fatalf("the log contains %q:\n%s", secret, text)
		}
	}
	want := map[string]bool{"POST /api/runs 201": false, "GET /api/runs 200": false, "GET /api/runs/nope 404": false}
	for _, r := range requests {
		key := r["method"].(string) + " " + r["path"].(string) + " " + strconv.Itoa(int(r["status"].(float64)))
		if _, ok := want[key]; ok {
			want[key] = true
			if _, ok := r["duration"]; !ok || r["user"] == nil {
				t.Fatalf("request line without duration or user: %v", r)
			}
		}
	}
	for k, seen := range want {
		if !seen {
			t.Fatalf("no request line %q in:\n%s", k, text)
		}
	}
	var msgs []string
	for _, l := range lifecycle {
		msgs = append(msgs, l["msg"].(string))
	}
	got := strings.Join(msgs, ", ")
	if got != "run created, run started, run waiting for the user, run started, run completed" {
		t.Fatalf("lifecycle lines: %s", got)
	}
	last := lifecycle[len(lifecycle)-1]
	if last["stop_reason"] != "completed" || last["cost_usd"] != 0.25 {
		t.Fatalf("the completion line: %v", last)
	}
}
