package llm

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"homework/db"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// testHost records what an iteration emits and the model calls it records.
type testHost struct {
	mu     sync.Mutex
	events []hostEvent
	calls  []spec.LLMCall
}

type hostEvent struct {
	Type spec.EventType
	Data map[string]any
}

func (h *testHost) Emit(ctx context.Context, typ spec.EventType, data any) error {
	b, _ := json.Marshal(data)
	var m map[string]any
	json.Unmarshal(b, &m)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, hostEvent{typ, m})
	return nil
}

func (h *testHost) RecordLLMCall(ctx context.Context, c spec.LLMCall) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
	return nil
}

func (h *testHost) Now() time.Time { return time.Now() }

func (h *testHost) Calls() []spec.LLMCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]spec.LLMCall(nil), h.calls...)
}

func (h *testHost) Events(typ spec.EventType) []hostEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hostEvent
	for _, e := range h.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (h *testHost) roles() []string {
	var out []string
	for _, c := range h.Calls() {
		out = append(out, c.Role)
	}
	return out
}

// fixture is a real store with one user and one started LLM run, a
// scripted endpoint and an Executor pointed at it.
type fixture struct {
	t    *testing.T
	db   *db.DB
	user *spec.User
	run  *spec.Run
	cfg  *spec.Config
	srv  *llmtest.Server
	e    *Executor
	host *testHost
}

func newFixture(t *testing.T, cfg spec.Config, opt func(*Options), script ...llmtest.Reply) *fixture {
	t.Helper()
	ctx := context.Background()
	d, err := db.Open(ctx, db.Options{Path: filepath.Join(t.TempDir(), "test.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	user, err := d.CreateUser(ctx, "a@example.com", "x", false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Objective == "" {
		cfg.Objective = "Compare the three SQLite drivers for Go and write a recommendation"
	}
	if cfg.Model == "" {
		cfg.Model = "gpt-4o-mini"
	}
	cfg.Executor = spec.ExecutorLLM
	srv := llmtest.New(t, script...)
	opts := Options{Store: d, BaseURL: srv.URL, APIKey: "sk-test", RetryBaseDelay: time.Millisecond, RetryMax: 2}
	if opt != nil {
		opt(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	run := &spec.Run{ID: uuid.NewString(), UserID: user.ID, Objective: cfg.Objective, Mode: spec.ModeAuto,
		Executor: spec.ExecutorLLM, Config: raw, Status: spec.StatusRunning, Iteration: 1}
	err = d.WriteTx(ctx, func(tx spec.Tx) error {
		if err := tx.InsertRun(ctx, run); err != nil {
			return err
		}
		if err := e.StartRun(ctx, tx, run, &cfg); err != nil {
			return err
		}
		return tx.UpdateRun(ctx, run)
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, db: d, user: user, run: run, cfg: &cfg, srv: srv, e: e, host: &testHost{}}
}

func (f *fixture) input(iteration int) *spec.Input {
	return &spec.Input{RunID: f.run.ID, UserID: f.user.ID, Iteration: iteration, Attempt: 1, Config: f.cfg,
		WorkspaceDocID: f.run.WorkspaceDocID, Host: f.host}
}

func (f *fixture) iterate(in *spec.Input) (*spec.Result, error) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return f.e.Iterate(ctx, in)
}

func (f *fixture) doc(path string) *spec.Document {
	f.t.Helper()
	d, err := f.db.FindRunDocumentByPath(context.Background(), f.user.ID, f.run.ID, path)
	if err != nil {
		f.t.Fatalf("document %q: %v", path, err)
	}
	return d
}

func (f *fixture) hasDoc(path string) bool {
	_, err := f.db.FindRunDocumentByPath(context.Background(), f.user.ID, f.run.ID, path)
	return err == nil
}

func (f *fixture) tasks() []*spec.Task {
	f.t.Helper()
	ts, err := f.db.ListTasks(context.Background(), f.user.ID, f.run.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return ts
}

// storedEvents returns the run's events of typ from the store.
func (f *fixture) storedEvents(typ spec.EventType) []map[string]any {
	f.t.Helper()
	rows, err := f.db.Reader().Query(`SELECT data FROM events WHERE run_id = ? AND type = ? ORDER BY seq`, f.run.ID, typ)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var s string
		rows.Scan(&s)
		var m map[string]any
		json.Unmarshal([]byte(s), &m)
		out = append(out, m)
	}
	return out
}

// checkTree fails unless every document but the root has a parent in the run.
func (f *fixture) checkTree() {
	f.t.Helper()
	docs, err := f.db.ListRunDocuments(context.Background(), f.user.ID, f.run.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	byID := map[string]*spec.Document{}
	for _, d := range docs {
		byID[d.ID] = d
	}
	for _, d := range docs {
		if d.Path == "" {
			if d.ParentID != "" || d.Kind != spec.DocWorkspace {
				f.t.Errorf("root: parent %q kind %q", d.ParentID, d.Kind)
			}
			continue
		}
		p := byID[d.ParentID]
		if p == nil {
			f.t.Errorf("%s has no parent in the run", d.Path)
			continue
		}
		want := ""
		if i := lastSlash(d.Path); i >= 0 {
			want = d.Path[:i]
		}
		if p.Path != want {
			f.t.Errorf("%s: parent is %q, want %q", d.Path, p.Path, want)
		}
	}
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

func call(name string, args any) llmtest.Call { return llmtest.ToolCall(name, args) }

func tools(calls ...llmtest.Call) llmtest.Reply { return llmtest.Tools(calls...) }

func report(exit bool, summary string, evidence ...string) llmtest.Reply {
	return tools(call(toolReportStatus, map[string]any{"exit_signal": exit, "progress_summary": summary,
		"completion_evidence": evidence, "confidence": "high"}))
}

func newHTTPServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
