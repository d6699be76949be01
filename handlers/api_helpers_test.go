package handlers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"homework/db"
	"homework/db/bind"
	"homework/db/pg"
	"homework/db/pg/pgtest"
	"homework/engine"
	"homework/engine/scripted"
	"homework/engine/spec"
	"homework/engine/waitfor"
)

// testServer is the real thing on a loopback port: a SQLite file under
// t.TempDir() or a fresh PostgreSQL database (see onBothStores), the engine
// with the scripted executor, and the HTTP server.
type testServer struct {
	t        *testing.T
	URL      string
	Store    spec.Store // the store the server uses, SQLite or PostgreSQL
	DB       *db.DB     // the SQLite store; nil on PostgreSQL
	Bus      *engine.Bus
	Engine   *engine.Engine
	Server   *Server
	Registry *prometheus.Registry
	ctx      context.Context
	shutOnce sync.Once
	shutErr  error
}

// The stores a test server can run on.
const (
	sqliteStore   = "sqlite"
	postgresStore = "postgres"
)

// testStores maps the name of a test (or subtest) that onBothStores runs
// on one store to that store.
var testStores sync.Map

// onBothStores runs test, the calling test function, once on each store as
// the subtests "sqlite" and "postgres", and reports true: the caller then
// returns. Inside those subtests it reports false and the test body runs,
// its test servers on that store. The PostgreSQL half skips in one line
// without HOMEWORK_TEST_PG (and fails under CI=true).
//
//	func TestX(t *testing.T) {
//		if onBothStores(t, TestX) {
//			return
//		}
//		ts := newTestServer(t, nil) // SQLite, then PostgreSQL
func onBothStores(t *testing.T, test func(*testing.T)) bool {
	t.Helper()
	if _, ok := testStores.Load(t.Name()); ok {
		return false
	}
	for _, store := range []string{sqliteStore, postgresStore} {
		testStores.Store(t.Name()+"/"+store, store)
		t.Run(store, func(t *testing.T) {
			if store == postgresStore {
				pgtest.ServerURL(t)
			}
			test(t)
		})
	}
	return true
}

// storeOf returns the store t's test servers use: the one onBothStores
// chose for t or the test it is a subtest of, else SQLite.
func storeOf(t testing.TB) string {
	for name := t.Name(); ; {
		if s, ok := testStores.Load(name); ok {
			return s.(string)
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return sqliteStore
		}
		name = name[:i]
	}
}

// testUser is an account with an API token.
type testUser struct {
	*spec.User
	Token string
}

// newTestServer starts a server; mod may adjust its options. Everything is
// stopped by t.Cleanup.
func newTestServer(t testing.TB, mod func(*Options)) *testServer {
	t.Helper()
	return newTestServerWith(t, nil, mod)
}

// newTestServerWith is newTestServer with more executors: extra gets the
// store and the engine (valid once the server runs) and returns them by name;
// emod, when given, adjusts the engine's options.
func newTestServerWith(t testing.TB, extra func(d *db.DB, eng func() *engine.Engine) map[string]engine.Executor, mod func(*Options), emod ...func(*engine.Options)) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	bus := engine.NewBus()
	var (
		e       *engine.Engine
		running atomic.Pointer[engine.Engine] // e, for the PostgreSQL listener
		store   spec.Store
		d       *db.DB
		err     error
	)
	eopts := engine.Options{Bus: bus, Workers: 4, FetchPollInterval: 20 * time.Millisecond, ShutdownGrace: 2 * time.Second}
	if storeOf(t) == postgresStore {
		if extra != nil {
			t.Fatal("newTestServerWith: the extra executors take the SQLite store")
		}
		p, err := pg.Open(ctx, pg.Options{URL: pgtest.NewDatabase(t), OnEvents: bus.Publish,
			OnInterrupt: func(runID string) {
				if e := running.Load(); e != nil {
					e.CancelLocal(runID)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		eopts.Backend, eopts.SharedStore = bind.Postgres(p), true
		eopts.Executors = map[string]engine.Executor{spec.ExecutorScript: &scripted.Executor{InTx: p.WriteTx}}
		store = p
	} else {
		d, err = db.Open(ctx, db.Options{Path: filepath.Join(t.TempDir(), "test.db"), OnEvents: bus.Publish})
		if err != nil {
			t.Fatal(err)
		}
		eopts.Backend, store = bind.SQLite(d), d
		eopts.Executors = map[string]engine.Executor{spec.ExecutorScript: &scripted.Executor{InTx: d.WriteTx}}
		if extra != nil {
			for name, x := range extra(d, func() *engine.Engine { return e }) {
				eopts.Executors[name] = x
			}
		}
	}
	for _, m := range emod {
		m(&eopts)
	}
	e, err = engine.New(eopts)
	if err != nil {
		t.Fatal(err)
	}
	running.Store(e)
	reg := prometheus.NewRegistry()
	if err := e.Register(reg); err != nil {
		t.Fatal(err)
	}
	// The server gets the store as the binary gives it (bind.Store), so
	// what the handlers ask of it beyond spec.Store is asked of the wrapper.
	opts := Options{DB: &bind.Store{Store: store}, Engine: e, Registry: reg, InsecureCookies: true, Heartbeat: 50 * time.Millisecond}
	if mod != nil {
		mod(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ts := &testServer{URL: "http://" + ln.Addr().String(), Store: store, DB: d, Bus: bus, Engine: e, Server: srv, Registry: reg, ctx: ctx}
	if tt, ok := t.(*testing.T); ok {
		ts.t = tt
	}
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := ts.shutdown(sctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		// Shutdown only closes listeners Serve has registered: a test that
		// ends (or skips) right after starting must still stop Serve.
		ln.Close()
		select {
		case <-served:
		case <-sctx.Done():
			t.Errorf("server did not stop serving within the shutdown timeout")
		}
		if err := e.Stop(sctx); err != nil {
			t.Errorf("engine stop: %v", err)
		}
		cancel()
		store.Close()
	})
	return ts
}

// shutdown shuts the HTTP server down once.
func (ts *testServer) shutdown(ctx context.Context) error {
	ts.shutOnce.Do(func() { ts.shutErr = ts.Server.Shutdown(ctx) })
	return ts.shutErr
}

// user creates an account with an API token.
func (ts *testServer) user(t testing.TB, email string) *testUser {
	t.Helper()
	u, err := ts.Store.CreateUser(ts.ctx, email, "x", false)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := ts.Store.CreateAPIToken(ts.ctx, u.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &testUser{User: u, Token: tok}
}

// request sends method path with body (a string, []byte or a value encoded
// as JSON) as the user, and returns the response and its body.
func (ts *testServer) request(t testing.TB, u *testUser, method, path string, body any, header ...string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case string:
		r, ct = strings.NewReader(b), "application/json"
	case []byte:
		r, ct = bytes.NewReader(b), "application/json"
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r, ct = bytes.NewReader(raw), "application/json"
	}
	req, err := http.NewRequest(method, ts.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if u != nil {
		req.Header.Set("Authorization", "Bearer "+u.Token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, out
}

// expect sends a request and checks the status, decoding a JSON answer
// into out when out is not nil.
func (ts *testServer) expect(t testing.TB, u *testUser, method, path string, body any, status int, out any, header ...string) *http.Response {
	t.Helper()
	resp, raw := ts.request(t, u, method, path, body, header...)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, resp.StatusCode, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp
}

// expectError checks an API error answer: status, code and (when not
// empty) field.
func (ts *testServer) expectError(t testing.TB, u *testUser, method, path string, body any, status int, code, field string, header ...string) ErrorBody {
	t.Helper()
	var eb ErrorBody
	resp := ts.expect(t, u, method, path, body, status, &eb, header...)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, want JSON", method, path, ct)
	}
	if eb.Error.Code != code || (field != "" && eb.Error.Field != field) || eb.Error.Message == "" {
		t.Fatalf("%s %s: error %+v, want code %q field %q", method, path, eb.Error, code, field)
	}
	return eb
}

// script returns the scripted executor's script for steps.
func script(steps ...scripted.Step) json.RawMessage {
	b, _ := json.Marshal(scripted.Script{Steps: steps})
	return b
}

func doneStep(summary string) scripted.Step {
	return scripted.Step{Summary: summary, Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"did it"}, ProgressSummary: summary}}
}

func askStep(question string) scripted.Step {
	return scripted.Step{Summary: "asking", Status: &spec.Status{NeedsUserInput: true, BlockingQuestions: []string{question}, ProgressSummary: "asking"}}
}

// createRun creates a scripted run through the API and returns its id.
func (ts *testServer) createRun(t testing.TB, u *testUser, steps ...scripted.Step) string {
	t.Helper()
	var out struct {
		RunID string `json:"run_id"`
	}
	ts.expect(t, u, "POST", "/api/runs", map[string]any{"objective": "test objective", "executor": "script", "script": script(steps...)}, http.StatusCreated, &out)
	return out.RunID
}

// waitStatus waits, on the run's bus subscription, until the run has status.
func (ts *testServer) waitStatus(t testing.TB, u *testUser, runID, status string) *spec.Run {
	t.Helper()
	subscribe := func() (<-chan *spec.Event, func()) { s := ts.Bus.SubscribeRun(runID, 1024); return s.C, s.Close }
	return waitfor.Status(t, 20*time.Second, subscribe, func() (*spec.Run, error) { return ts.Store.FindRun(ts.ctx, u.ID, runID) }, status)
}

// waitUntil polls cond, which reads state that has no signal of its own
// (such as the bus's subscriber count), until it holds.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// sseMsg is one parsed SSE message; Comment is set for ": ..." lines.
type sseMsg struct {
	ID, Event, Data, Comment string
}

// sseConn is a raw SSE client: it reads messages exactly as sent.
type sseConn struct {
	Resp *http.Response
	r    *bufio.Reader
	once sync.Once
}

// openSSE opens an event stream as u with optional header pairs.
func (ts *testServer) openSSE(t testing.TB, u *testUser, path string, header ...string) *sseConn {
	t.Helper()
	req, err := http.NewRequest("GET", ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if u != nil {
		req.Header.Set("Authorization", "Bearer "+u.Token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	c := &sseConn{Resp: resp, r: bufio.NewReader(resp.Body)}
	t.Cleanup(c.Close)
	return c
}

// Close closes the connection.
func (c *sseConn) Close() { c.once.Do(func() { c.Resp.Body.Close() }) }

// Next returns the next message (events and comments; the retry: field
// alone is skipped). It returns io.EOF when the stream ended cleanly.
func (c *sseConn) Next() (sseMsg, error) {
	var m sseMsg
	seen := false
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && !seen && line == "" {
				return m, io.EOF
			}
			return m, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if seen {
				return m, nil
			}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			m.Comment, seen = value, true
		case "id":
			m.ID, seen = value, true
		case "event":
			m.Event, seen = value, true
		case "data":
			m.Data, seen = value, true
		}
	}
}

// NextEvent returns the next message that is an event, skipping comments.
func (c *sseConn) NextEvent() (sseMsg, error) {
	for {
		m, err := c.Next()
		if err != nil || m.Comment == "" {
			return m, err
		}
	}
}

// event decodes an SSE message's data.
func (m sseMsg) event(t testing.TB) *spec.Event {
	t.Helper()
	var e spec.Event
	if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
		t.Fatalf("event data %q: %v", m.Data, err)
	}
	return &e
}

// readAll reads events until the stream ends and returns them.
func (c *sseConn) readAll(t testing.TB) []sseMsg {
	t.Helper()
	var out []sseMsg
	for {
		m, err := c.NextEvent()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		out = append(out, m)
	}
}

// waitWithin calls wait and fails the test when it has not returned within
// d, so no cleanup can hang the test binary.
func waitWithin(t testing.TB, what string, d time.Duration, wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("waiting for %s: not done after %v", what, d)
	}
}
