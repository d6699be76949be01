package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"homework/db"
	"homework/engine/scripted"
	"homework/engine/spec"
	"homework/engine/waitfor"

	"github.com/riverqueue/river/riverdriver/riversqlite"
)

// harness is a real engine over a real SQLite file with the scripted executor.
type harness struct {
	t   *testing.T
	db  *db.DB
	bus *Bus
	e   *Engine
	ctx context.Context
}

func newHarness(t *testing.T, mod func(*Options)) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bus := NewBus()
	d, err := db.Open(ctx, db.Options{Path: filepath.Join(t.TempDir(), "h.db"), OnEvents: bus.Publish})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Backend: sqliteBackend(d), Bus: bus, Executors: map[string]Executor{spec.ExecutorScript: &scripted.Executor{InTx: d.WriteTx}},
		Workers: 4, FetchPollInterval: 20 * time.Millisecond, ShutdownGrace: 2 * time.Second}
	if mod != nil {
		mod(&opts)
	}
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, db: d, bus: bus, e: e, ctx: ctx}
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := e.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		d.Close()
	})
	return h
}

func (h *harness) user(email string) *spec.User {
	h.t.Helper()
	u, err := h.db.CreateUser(h.ctx, email, "x", false)
	if err != nil {
		h.t.Fatal(err)
	}
	return u
}

func script(steps ...scripted.Step) json.RawMessage {
	b, _ := json.Marshal(scripted.Script{Steps: steps})
	return b
}

func (h *harness) create(u *spec.User, cfg spec.Config) *spec.Run {
	h.t.Helper()
	if cfg.Objective == "" {
		cfg.Objective = "test objective"
	}
	cfg.Executor = spec.ExecutorScript
	r, err := h.e.CreateRun(h.ctx, u, cfg)
	if err != nil {
		h.t.Fatalf("create run: %v", err)
	}
	return r
}

// waitFor waits, on the run's event stream, until cond holds for the run.
func (h *harness) waitFor(u *spec.User, runID string, what string, cond func(*spec.Run) bool) *spec.Run {
	h.t.Helper()
	return waitfor.Run(h.t, what, 20*time.Second, runEvents(h.bus, runID),
		func() (*spec.Run, error) { return h.db.FindRun(h.ctx, u.ID, runID) }, cond)
}

// runEvents subscribes to a run's events on bus, for waitfor.
func runEvents(bus *Bus, runID string) waitfor.Subscribe {
	return func() (<-chan *spec.Event, func()) {
		s := bus.SubscribeRun(runID, 1024)
		return s.C, s.Close
	}
}

func (h *harness) waitStatus(u *spec.User, runID, status string) *spec.Run {
	h.t.Helper()
	return h.waitFor(u, runID, "status "+status, func(r *spec.Run) bool { return r.Status == status })
}

// events returns all the run's events and checks seq is gap-free.
func (h *harness) events(u *spec.User, runID string) []*spec.Event {
	h.t.Helper()
	evs, err := h.db.ListRunEvents(h.ctx, u.ID, runID, 0, 100000)
	if err != nil {
		h.t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			h.t.Fatalf("event %d has seq %d: not gap-free", i+1, e.Seq)
		}
	}
	return evs
}

func countType(evs []*spec.Event, typ spec.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// checkMetricsAddUp asserts the run's metrics equal the sum over its iterations.
func (h *harness) checkMetricsAddUp(u *spec.User, runID string) {
	h.t.Helper()
	r, err := h.db.FindRun(h.ctx, u.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	its, err := h.db.ListIterations(h.ctx, u.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	var sum spec.Metrics
	for _, it := range its {
		sum.Add(it.Metrics)
	}
	got, want := r.Metrics, sum
	if got.Iterations != want.Iterations || got.TokensTotal != want.TokensTotal || got.ToolCallsTotal != want.ToolCallsTotal ||
		got.RunningMS != want.RunningMS || got.FalseCompletionsBlocked != want.FalseCompletionsBlocked ||
		!closeEnough(got.CostTotalUSD, want.CostTotalUSD) {
		h.t.Fatalf("run metrics %+v do not equal the sum over iterations %+v", got, want)
	}
}

func closeEnough(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

func done(summary string, evidence ...string) scripted.Step {
	if len(evidence) == 0 {
		evidence = []string{"did it"}
	}
	return scripted.Step{Summary: summary, Status: &spec.Status{ExitSignal: true, CompletionEvidence: evidence, ProgressSummary: summary}}
}

func work(summary string) scripted.Step {
	return scripted.Step{Summary: summary, Status: &spec.Status{ProgressSummary: summary, RemainingWork: []string{"more"}}}
}

// sqliteBackend binds a SQLite store as cmd/homework does (db/bind imports
// this package, so its tests bind here).
func sqliteBackend(d *db.DB) Backend {
	return Bind(d, riversqlite.New(d.Writer()), func(tx spec.Tx) *sql.Tx { return tx.(*db.Tx).SQL })
}
