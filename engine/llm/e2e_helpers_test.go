package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"homework/db"
	"homework/db/bind"
	"homework/engine"
	"homework/engine/llm"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
	"homework/engine/waitfor"
)

// e2e is a real engine over a real SQLite file with the LLM executor
// pointed at a scripted endpoint, and one user.
type e2e struct {
	t    testing.TB
	ctx  context.Context
	db   *db.DB
	bus  *engine.Bus
	eng  *engine.Engine
	x    *llm.Executor
	srv  *llmtest.Server
	user *spec.User
	// commits holds the events of each committed write, in commit order
	// (the store's OnEvents).
	commits *commitLog
	// stop stops the engine and closes the store, before the test ends
	// when called (a benchmark's harnesses, one after another); the
	// test's cleanup calls it too.
	stop func()
}

// commitLog records the events of every committed write.
type commitLog struct {
	mu      sync.Mutex
	batches [][]*spec.Event
}

func (l *commitLog) add(evs []*spec.Event) {
	l.mu.Lock()
	l.batches = append(l.batches, evs)
	l.mu.Unlock()
}

// of returns the committed writes that have events of run, with only
// those events, in commit order.
func (l *commitLog) of(runID string) [][]*spec.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]*spec.Event
	for _, b := range l.batches {
		var mine []*spec.Event
		for _, e := range b {
			if e.RunID == runID {
				mine = append(mine, e)
			}
		}
		if len(mine) > 0 {
			out = append(out, mine)
		}
	}
	return out
}

// e2eOptions adjust newE2E.
type e2eOptions struct {
	llm    func(*llm.Options)
	engine func(*engine.Options, *db.DB)
	// noEndpoint leaves the executor without a base URL and API key.
	noEndpoint bool
}

// newE2E starts the endpoint (answering with script), the store and the
// engine. Everything is stopped when the test ends, the engine before the
// endpoint.
func newE2E(t testing.TB, o e2eOptions, script ...llmtest.Reply) *e2e {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := llmtest.New(t, script...)
	bus := engine.NewBus()
	commits := &commitLog{}
	d, err := db.Open(ctx, db.Options{Path: migratedFile(t), OnEvents: func(evs []*spec.Event) {
		commits.add(evs)
		bus.Publish(evs)
	}})
	if err != nil {
		t.Fatal(err)
	}
	var eng *engine.Engine
	lo := llm.Options{Store: d, BaseURL: srv.URL, APIKey: "test", DefaultModel: "gpt-4o-mini",
		RetryBaseDelay: time.Millisecond,
		RecordNarration: func(ctx context.Context, run *spec.Run, c spec.LLMCall) error {
			return eng.RecordLLMCall(ctx, run, c)
		}}
	if o.noEndpoint {
		lo.BaseURL, lo.APIKey = "", ""
	}
	if o.llm != nil {
		o.llm(&lo)
	}
	x, err := llm.New(lo)
	if err != nil {
		t.Fatal(err)
	}
	eo := engine.Options{Backend: bind.SQLite(d), Bus: bus, Executors: map[string]engine.Executor{spec.ExecutorLLM: x},
		Workers: 4, FetchPollInterval: 20 * time.Millisecond, ShutdownGrace: 2 * time.Second}
	if o.engine != nil {
		o.engine(&eo, d)
	}
	eng, err = engine.New(eo)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := eng.Stop(sctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
		d.Close()
	})
	t.Cleanup(stop)
	user, err := d.CreateUser(ctx, "e2e@example.com", "x", false)
	if err != nil {
		t.Fatal(err)
	}
	return &e2e{t: t, ctx: ctx, db: d, bus: bus, eng: eng, x: x, srv: srv, user: user, commits: commits, stop: stop}
}

// migrated holds the files of a freshly migrated database. Applying the
// migrations (ours and River's) takes over a second under the race
// detector, so each test starts from a copy instead.
var migrated struct {
	once  sync.Once
	files map[string][]byte
	err   error
}

// migratedFile returns the path of a new, migrated database file under the
// test's temporary directory.
func migratedFile(t testing.TB) string {
	t.Helper()
	migrated.once.Do(func() {
		dir, err := os.MkdirTemp("", "homework-e2e-")
		if err != nil {
			migrated.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "h.db")
		d, err := db.Open(context.Background(), db.Options{Path: path})
		if err != nil {
			migrated.err = err
			return
		}
		if migrated.err = d.Close(); migrated.err != nil {
			return
		}
		migrated.files = map[string][]byte{}
		for _, suffix := range []string{"", "-wal"} {
			b, err := os.ReadFile(path + suffix)
			if errors.Is(err, fs.ErrNotExist) && suffix != "" {
				continue
			} else if err != nil {
				migrated.err = err
				return
			}
			migrated.files[suffix] = b
		}
	})
	if migrated.err != nil {
		t.Fatalf("migrate template database: %v", migrated.err)
	}
	path := filepath.Join(t.TempDir(), "h.db")
	for suffix, b := range migrated.files {
		if err := os.WriteFile(path+suffix, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// create starts an LLM run with cfg.
func (h *e2e) create(cfg spec.Config) *spec.Run {
	h.t.Helper()
	if cfg.Objective == "" {
		cfg.Objective = "Compare the three SQLite drivers for Go and write a recommendation"
	}
	cfg.Executor = spec.ExecutorLLM
	r, err := h.eng.CreateRun(h.ctx, h.user, cfg)
	if err != nil {
		h.t.Fatalf("create run: %v", err)
	}
	return r
}

// waitFor waits, on the run's event stream, until cond holds for the run.
func (h *e2e) waitFor(runID, what string, cond func(*spec.Run) bool) *spec.Run {
	h.t.Helper()
	subscribe := func() (<-chan *spec.Event, func()) { s := h.bus.SubscribeRun(runID, 1024); return s.C, s.Close }
	return waitfor.Run(h.t, what, 30*time.Second, subscribe, func() (*spec.Run, error) { return h.db.FindRun(h.ctx, h.user.ID, runID) }, cond)
}

// waitStatus waits until the run has status.
func (h *e2e) waitStatus(runID, status string) *spec.Run {
	h.t.Helper()
	return h.waitFor(runID, "status "+status, func(r *spec.Run) bool { return r.Status == status })
}

// events returns the run's events and fails unless their seq is gap-free.
func (h *e2e) events(runID string) []*spec.Event {
	h.t.Helper()
	evs, err := h.db.ListRunEvents(h.ctx, h.user.ID, runID, 0, 100000)
	if err != nil {
		h.t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			h.t.Fatalf("event %d (%s) has seq %d: not gap-free", i+1, e.Type, e.Seq)
		}
	}
	return evs
}

// eventsOf returns the data of the run's events of typ, in order.
func (h *e2e) eventsOf(runID string, typ spec.EventType) []map[string]any {
	h.t.Helper()
	var out []map[string]any
	for _, e := range h.events(runID) {
		if e.Type != typ {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(e.Data, &m); err != nil {
			h.t.Fatalf("event %d %s: %v", e.Seq, typ, err)
		}
		out = append(out, m)
	}
	return out
}

func (h *e2e) iterations(runID string) []*spec.Iteration {
	h.t.Helper()
	its, err := h.db.ListIterations(h.ctx, h.user.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	return its
}

func (h *e2e) calls(runID string) []*spec.LLMCall {
	h.t.Helper()
	cs, err := h.db.ListLLMCalls(h.ctx, h.user.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	return cs
}

func (h *e2e) docs(runID string) []*spec.Document {
	h.t.Helper()
	ds, err := h.db.ListRunDocuments(h.ctx, h.user.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	return ds
}

func (h *e2e) doc(runID, path string) *spec.Document {
	h.t.Helper()
	d, err := h.db.FindRunDocumentByPath(h.ctx, h.user.ID, runID, path)
	if err != nil {
		h.t.Fatalf("document %q: %v", path, err)
	}
	return d
}

func (h *e2e) tasks(runID string) []*spec.Task {
	h.t.Helper()
	ts, err := h.db.ListTasks(h.ctx, h.user.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	return ts
}

// report decodes the run's report.
func (h *e2e) report(r *spec.Run) spec.Report {
	h.t.Helper()
	if r.Report == nil {
		h.t.Fatalf("run %s (%s) has no report", r.ID, r.Status)
	}
	return *r.Report
}

// notification returns the user's notification of kind for the run.
func (h *e2e) notification(runID, kind string) *spec.Notification {
	h.t.Helper()
	ns, err := h.db.ListNotifications(h.ctx, h.user.ID, 0, 200)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, n := range ns {
		if n.RunID == runID && n.Kind == kind {
			return n
		}
	}
	h.t.Fatalf("no %s notification for run %s among %d", kind, runID, len(ns))
	return nil
}

// checkUsageAddsUp fails unless the run's usage equals the sum of its
// llm_calls rows and its metrics equal the sum over its iterations.
func (h *e2e) checkUsageAddsUp(runID string) {
	h.t.Helper()
	r, err := h.db.FindRun(h.ctx, h.user.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	var calls spec.Metrics
	for _, c := range h.calls(runID) {
		calls.AddCall(c.Model, c.PromptTokens, c.CompletionTokens, c.CostUSD, c.Priced)
	}
	m := r.Metrics
	if m.TokensTotal != calls.TokensTotal || m.PromptTokens != calls.PromptTokens || m.LLMCalls != calls.LLMCalls ||
		m.UnpricedCalls != calls.UnpricedCalls || !near(m.CostTotalUSD, calls.CostTotalUSD) {
		h.t.Errorf("run usage %+v does not equal the sum of llm_calls %+v", m, calls)
	}
	for model, u := range calls.ByModel {
		if got := m.ByModel[model]; got.Calls != u.Calls || got.PromptTokens != u.PromptTokens || got.Unpriced != u.Unpriced || !near(got.CostUSD, u.CostUSD) {
			h.t.Errorf("by_model[%s] = %+v, llm_calls sum to %+v", model, got, u)
		}
	}
	var its spec.Metrics
	for _, it := range h.iterations(runID) {
		its.Add(it.Metrics)
	}
	if m.Iterations != its.Iterations || m.TokensTotal != its.TokensTotal || m.ToolCallsTotal != its.ToolCallsTotal ||
		m.RunningMS != its.RunningMS || m.FalseCompletionsBlocked != its.FalseCompletionsBlocked ||
		m.UnpricedCalls != its.UnpricedCalls || !near(m.CostTotalUSD, its.CostTotalUSD) {
		h.t.Errorf("run metrics %+v do not equal the sum over iterations %+v", m, its)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Request roles, told apart by their system prompts.
const (
	reqPlanner    = "planner"
	reqExecutor   = "executor"
	reqRepair     = "repair"
	reqSummarizer = "summarizer"
)

// roleOf says which of the executor's roles sent r.
func roleOf(r llmtest.Request) string {
	s := r.System()
	switch {
	case strings.HasPrefix(s, "You are the planner"):
		return reqPlanner
	case strings.HasPrefix(s, "You are an executor agent"):
		return reqExecutor
	case strings.HasPrefix(s, "You repair the JSON"):
		return reqRepair
	case strings.HasPrefix(s, "You write the narrative summary"):
		return reqSummarizer
	}
	return "unknown"
}

// requestsOf returns the requests the endpoint received from role.
func requestsOf(srv *llmtest.Server, role string) []llmtest.Request {
	var out []llmtest.Request
	for _, r := range srv.Requests() {
		if roleOf(r) == role {
			out = append(out, r)
		}
	}
	return out
}

// userPrompt returns the iteration context: the first user message.
func userPrompt(r llmtest.Request) string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	return ""
}

// narrate makes the endpoint answer every summarizer request with text.
func narrate(srv *llmtest.Server, text string) {
	srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if roleOf(r) != reqSummarizer {
			return llmtest.Reply{}, false
		}
		return llmtest.Text(text), true
	})
}

func call(name string, args any) llmtest.Call { return llmtest.ToolCall(name, args) }

func tools(calls ...llmtest.Call) llmtest.Reply { return llmtest.Tools(calls...) }

// status is a report_status reply.
func status(exit bool, summary string, evidence ...string) llmtest.Reply {
	args := map[string]any{"exit_signal": exit, "progress_summary": summary, "confidence": "high"}
	if len(evidence) > 0 {
		args["completion_evidence"] = evidence
	}
	if !exit {
		args["remaining_work"] = []string{"more research"}
	}
	return tools(call("report_status", args))
}

// barrier releases its waiters once n have arrived, or after timeout.
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	all     chan struct{}
	timeout time.Duration
}

func newBarrier(n int, timeout time.Duration) *barrier {
	return &barrier{n: n, all: make(chan struct{}), timeout: timeout}
}

// wait blocks until n callers are waiting, and reports whether they all came.
func (b *barrier) wait() bool {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return true
	case <-time.After(b.timeout):
		return false
	}
}
