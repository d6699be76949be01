package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"homework/db"
	"homework/db/pg"
	"homework/db/pg/pgtest"
	"homework/engine/scripted"
	"homework/engine/spec"
	"homework/engine/waitfor"

	"github.com/riverqueue/river/riverdriver/riversqlite"
)

// harness is a real engine over a real store (a SQLite file, or a
// PostgreSQL database) with the scripted executor.
type harness struct {
	t   *testing.T
	db  spec.Store
	bus *Bus
	e   *Engine
	ctx context.Context
	// backend binds another engine to the same store (a restart).
	backend func() Backend
}

// The stores a harness can run on.
const (
	sqliteStore   = "sqlite"
	postgresStore = "postgres"
)

// onBothStores runs test on SQLite and on PostgreSQL (which CI provides;
// elsewhere it skips without HOMEWORK_TEST_PG).
func onBothStores(t *testing.T, test func(t *testing.T, store string)) {
	for _, store := range []string{sqliteStore, postgresStore} {
		t.Run(store, func(t *testing.T) { test(t, store) })
	}
}

func newHarness(t *testing.T, mod func(*Options)) *harness {
	t.Helper()
	return newHarnessOn(t, sqliteStore, mod)
}

// newHarnessOn starts an engine over a new store of the given kind.
func newHarnessOn(t *testing.T, store string, mod func(*Options)) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bus := NewBus()
	h := &harness{t: t, bus: bus, ctx: ctx}
	opts := Options{Bus: bus, Workers: 4, FetchPollInterval: 20 * time.Millisecond, ShutdownGrace: 2 * time.Second}
	switch store {
	case sqliteStore:
		d, err := db.Open(ctx, db.Options{Path: filepath.Join(t.TempDir(), "h.db"), OnEvents: bus.Publish})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		h.db, h.backend = d, func() Backend { return sqliteBackend(d) }
	case postgresStore:
		var running atomic.Pointer[Engine]
		d, err := pg.Open(ctx, pg.Options{URL: pgtest.NewDatabase(t), OnEvents: bus.Publish, OnInterrupt: func(runID string) {
			if e := running.Load(); e != nil {
				e.CancelLocal(runID)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		h.db, h.backend = d, func() Backend {
			return Bind(d, riverpgxv5.New(d.Pool()), func(tx spec.Tx) pgx.Tx { return tx.(*pg.Tx).PG })
		}
		opts.SharedStore = true
		defer func() { running.Store(h.e) }()
	}
	opts.Backend = h.backend()
	opts.Executors = map[string]Executor{spec.ExecutorScript: &scripted.Executor{InTx: h.db.WriteTx}}
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
	h.e = e
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		if err := e.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return h
}

// successor returns a new engine on h's store and bus with h's executors,
// as the next process on the database would be; it is not started, and is
// stopped when the test ends.
func (h *harness) successor(store string) *Engine {
	h.t.Helper()
	e, err := New(Options{Backend: h.backend(), Bus: h.bus, Executors: h.e.opts.Executors, FetchPollInterval: 20 * time.Millisecond,
		SharedStore: store == postgresStore})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.Stop(ctx)
	})
	return e
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
