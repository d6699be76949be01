// Package storetest is the store conformance suite: the behaviour every
// store (SQLite today, PostgreSQL next) must have, tested only through the
// store contract so the same suite runs unchanged against each. A store's
// own tests call Run with a function that opens a fresh, empty store.
//
// The suite covers runs, events (gap-free seq per run under concurrency, no
// gap after a rollback), iterations with their typed gate, checks and
// artifacts, documents and full-text search, tasks, the inbox,
// notifications, API tokens and sessions, and isolation by user: every
// read that takes a user id returns ENOTFOUND for another user's object.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"homework/engine/spec"
)

// Run runs the conformance suite: the whole store contract of
// engine/spec/store.go. open returns a new, empty store that lives until t
// ends.
func Run(t *testing.T, open func(t *testing.T) spec.Store) {
	s := suite{open: open}
	t.Run("runs round-trip, page newest first and count by status", s.runs)
	t.Run("concurrent event appends get gap-free seqs per run", s.concurrentEvents)
	t.Run("a rolled-back append leaves no gap", s.rollbackEvents)
	t.Run("the user feed holds only the user's events in id order", s.userFeed)
	t.Run("a feed reader polling during concurrent writes skips no event", s.feedUnderConcurrentWrites)
	t.Run("iterations keep their typed gate, checks and artifacts", s.iterations)
	t.Run("documents are put, updated and found by full-text search", s.documents)
	t.Run("a run's documents are listed without those inside given folders", s.documentsOutside)
	t.Run("iteration summaries are found by search as soon as they are written", s.summarySearch)
	t.Run("tasks keep their order and updates", s.tasks)
	t.Run("inbox items are consumed once", s.inbox)
	t.Run("notifications are listed newest first and marked read", s.notifications)
	t.Run("API tokens work until revoked", s.tokens)
	t.Run("sessions work until deleted", s.sessions)
	t.Run("credentials are live until revoked, expired or deleted", s.liveCredentials)
	t.Run("another user's objects are not found", s.isolation)
	t.Run("slots: running runs are counted and the oldest queued come first", s.slots)
	t.Run("a write that fails fails its transaction, whatever follows it", s.failedWrites)
	t.Run("leases: running runs list their lease, renewed by the owner's current attempt", s.leases)
	t.Run("metric sums add up iterations and model calls", s.metricSums)
	t.Run("a shared store names the live and the dead processes and binds runs to hosts", s.cluster)
	runLater(t, open)
}

type suite struct {
	open func(t *testing.T) spec.Store
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	s   spec.Store
}

func (s suite) fixture(t *testing.T) *fixture {
	t.Helper()
	return &fixture{t: t, ctx: context.Background(), s: s.open(t)}
}

func (f *fixture) user(email string) *spec.User {
	f.t.Helper()
	u, err := f.s.CreateUser(f.ctx, email, "hash", false)
	if err != nil {
		f.t.Fatalf("create user %s: %v", email, err)
	}
	return u
}

func (f *fixture) run(userID int64, id string) *spec.Run {
	f.t.Helper()
	r := &spec.Run{ID: id, UserID: userID, Objective: "objective " + id, Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
		Config: json.RawMessage(`{}`), Status: spec.StatusQueued}
	f.tx(func(tx spec.Tx) error { return tx.InsertRun(f.ctx, r) })
	return r
}

func (f *fixture) tx(fn func(tx spec.Tx) error) {
	f.t.Helper()
	if err := f.s.WriteTx(f.ctx, fn); err != nil {
		f.t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := spec.ErrorCode(err); got != code {
		t.Errorf("%s: error %v (code %q), want code %q", what, err, got, code)
	}
}

func (s suite) runs(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	for i := range 5 {
		f.run(u.ID, fmt.Sprintf("run-%d", i))
	}
	r, err := f.s.FindRun(f.ctx, u.ID, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	r.Status = spec.StatusStopped
	r.StopReason = &spec.StopReason{Type: spec.StopNoProgress, Detail: "same fingerprint", Evidence: json.RawMessage(`{"n":3}`)}
	r.Metrics.AddCall("model-a", 100, 20, 0.25, true)
	r.Report = &spec.Report{Title: "Stopped", Status: spec.StatusStopped, Metrics: spec.ReportMetrics{Iterations: 4},
		StoppingReason: spec.StoppingReason{Type: spec.StopNoProgress}}
	f.tx(func(tx spec.Tx) error { return tx.UpdateRun(f.ctx, r) })
	got, err := f.s.FindRun(f.ctx, u.ID, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != spec.StatusStopped || got.StopReason == nil || got.StopReason.Type != spec.StopNoProgress ||
		string(got.StopReason.Evidence) != `{"n":3}` || got.Metrics.ByModel["model-a"].CostUSD != 0.25 || got.Metrics.TokensTotal != 120 ||
		got.Report == nil || got.Report.Title != "Stopped" || got.Report.Metrics.Iterations != 4 || got.Report.StoppingReason.Type != spec.StopNoProgress {
		t.Errorf("run after update = %+v", got)
	}
	if got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() {
		t.Errorf("run times not stamped: %+v", got)
	}
	f.tx(func(tx spec.Tx) error {
		_, err := tx.FindRun(f.ctx, "no-such-run")
		wantCode(t, "tx.FindRun of a missing run", err, spec.ENOTFOUND)
		return nil
	})
	err = f.s.WriteTx(f.ctx, func(tx spec.Tx) error {
		return tx.InsertRun(f.ctx, &spec.Run{ID: "orphan", UserID: u.ID, ParentRunID: "no-such-run", Objective: "o",
			Mode: spec.ModeAuto, Executor: spec.ExecutorScript, Config: json.RawMessage(`{}`), Status: spec.StatusQueued})
	})
	if wantCode(t, "a run with a missing parent", err, spec.EINVALID); spec.ErrorField(err) != "parent_run_id" {
		t.Errorf("a run with a missing parent: field %q, want parent_run_id", spec.ErrorField(err))
	}
	err = f.s.WriteTx(f.ctx, func(tx spec.Tx) error {
		return tx.InsertRun(f.ctx, &spec.Run{ID: "run-0", UserID: u.ID, Objective: "o", Mode: spec.ModeAuto,
			Executor: spec.ExecutorScript, Config: json.RawMessage(`{}`), Status: spec.StatusQueued})
	})
	if err == nil {
		t.Error("a second run with the same id was stored")
	}

	var seen []string
	cursor := ""
	for range 10 {
		page, err := f.s.ListRuns(f.ctx, u.ID, spec.RunFilter{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			seen = append(seen, r.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if fmt.Sprint(seen) != "[run-4 run-3 run-2 run-1 run-0]" {
		t.Errorf("paged runs = %v, want newest first, each once", seen)
	}
	stopped, err := f.s.ListRuns(f.ctx, u.ID, spec.RunFilter{Status: spec.StatusStopped})
	if err != nil || len(stopped.Runs) != 1 || stopped.Runs[0].ID != "run-2" {
		t.Errorf("stopped runs = %v, %v", stopped, err)
	}
	_, err = f.s.ListRuns(f.ctx, u.ID, spec.RunFilter{Cursor: "not a cursor"})
	wantCode(t, "ListRuns with a bad cursor", err, spec.EINVALID)
	counts, err := f.s.CountRunsByStatus(f.ctx, u.ID)
	if err != nil || counts[spec.StatusQueued] != 4 || counts[spec.StatusStopped] != 1 {
		t.Errorf("counts = %v, %v", counts, err)
	}
}

func (s suite) concurrentEvents(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	runs := []string{"r1", "r2", "r3"}
	for _, id := range runs {
		f.run(u.ID, id)
	}
	const writers, each = 16, 25
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				runID := runs[(g+i)%len(runs)]
				var err error
				if i%5 == 0 {
					// Appends inside a state transaction interleave with
					// the group-committed ones.
					err = f.s.WriteTx(f.ctx, func(tx spec.Tx) error {
						_, err := tx.AppendEvent(f.ctx, runID, spec.EventTaskUpdated, map[string]int{"g": g, "i": i})
						return err
					})
				} else {
					_, err = f.s.AppendEvent(f.ctx, runID, spec.EventToolCall, map[string]int{"g": g, "i": i})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, id := range runs {
		evs, err := f.s.ListRunEvents(f.ctx, u.ID, id, 0, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) || e.RunID != id || e.UserID != u.ID {
				t.Fatalf("run %s: event %d has seq %d run %s user %d", id, i, e.Seq, e.RunID, e.UserID)
			}
			if i > 0 && e.ID <= evs[i-1].ID {
				t.Fatalf("run %s: ids not increasing with seq at %d", id, i)
			}
		}
		total += len(evs)
		after, err := f.s.ListRunEvents(f.ctx, u.ID, id, int64(len(evs)-2), 10)
		if err != nil || len(after) != 2 || after[0].Seq != int64(len(evs)-1) {
			t.Errorf("run %s: events after seq %d = %d (%v)", id, len(evs)-2, len(after), err)
		}
	}
	if total != writers*each {
		t.Errorf("%d events stored, want %d", total, writers*each)
	}
	_, err := f.s.AppendEvent(f.ctx, "missing", spec.EventToolCall, nil)
	wantCode(t, "append to a missing run", err, spec.ENOTFOUND)
}

func (s suite) rollbackEvents(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	f.run(u.ID, "r")
	if _, err := f.s.AppendEvent(f.ctx, "r", spec.EventRunCreated, nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := f.s.WriteTx(f.ctx, func(tx spec.Tx) error {
		if _, err := tx.AppendEvent(f.ctx, "r", spec.EventRunStarted, nil); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteTx returned %v, want the function's error", err)
	}
	e, err := f.s.AppendEvent(f.ctx, "r", spec.EventRunStarted, nil)
	if err != nil || e.Seq != 2 {
		t.Fatalf("after a rollback the next seq is %d (%v), want 2", e.Seq, err)
	}
}

func (s suite) userFeed(t *testing.T) {
	f := s.fixture(t)
	a, b := f.user("a@example.com"), f.user("b@example.com")
	f.run(a.ID, "ra")
	f.run(b.ID, "rb")
	for i := range 3 {
		for _, id := range []string{"ra", "rb"} {
			if _, err := f.s.AppendEvent(f.ctx, id, spec.EventToolCall, map[string]int{"i": i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed, err := f.s.ListUserEvents(f.ctx, a.ID, 0, 100)
	if err != nil || len(feed) != 3 {
		t.Fatalf("feed of a: %d events (%v)", len(feed), err)
	}
	for i, e := range feed {
		if e.RunID != "ra" || (i > 0 && e.ID <= feed[i-1].ID) {
			t.Errorf("feed event %d = %+v", i, e)
		}
	}
	rest, err := f.s.ListUserEvents(f.ctx, a.ID, feed[0].ID, 100)
	if err != nil || len(rest) != 2 || rest[0].ID != feed[1].ID {
		t.Errorf("feed after the first id: %d (%v)", len(rest), err)
	}
}

// feedUnderConcurrentWrites has writers of one user's runs commit
// transactions of two events each, concurrently, while a reader follows the
// feed by id as the user feed stream does (after the last id it got). The
// reader must get every committed event exactly once: ids only grow, and an
// event that commits after the reader passed its id would be lost.
func (s suite) feedUnderConcurrentWrites(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	runs := []string{"f1", "f2", "f3", "f4"}
	for _, id := range runs {
		f.run(u.ID, id)
	}
	const each = 20
	var wg sync.WaitGroup
	errs := make(chan error, len(runs))
	for _, id := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				err := f.s.WriteTx(f.ctx, func(tx spec.Tx) error {
					if _, err := tx.AppendEvent(f.ctx, id, spec.EventToolCall, map[string]int{"i": i}); err != nil {
						return err
					}
					// More work between the appends and the commit widens
					// the window in which another writer can commit first.
					if _, err := tx.FindRun(f.ctx, id); err != nil {
						return err
					}
					_, err := tx.AppendEvent(f.ctx, id, spec.EventToolResult, map[string]int{"i": i})
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("append to %s: %w", id, err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var last int64
	seen := map[string]bool{}
	poll := func() {
		evs, err := f.s.ListUserEvents(f.ctx, u.ID, last, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.ID <= last {
				t.Fatalf("the feed went back from id %d to %d", last, e.ID)
			}
			k := fmt.Sprintf("%s/%d", e.RunID, e.Seq)
			if seen[k] {
				t.Fatalf("event %s delivered twice", k)
			}
			seen[k] = true
			last = e.ID
		}
	}
	for writing := true; writing; {
		select {
		case <-done:
			writing = false
		default:
		}
		poll()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Everything is committed now: the rest of the feed comes in pages.
	for before := -1; before != len(seen); {
		before = len(seen)
		poll()
	}
	if want := len(runs) * each * 2; len(seen) != want {
		t.Fatalf("the reader got %d of %d events: events that committed below its cursor were skipped", len(seen), want)
	}
}

func (s suite) iterations(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	f.run(u.ID, "r")
	gate := &spec.GateRecord{Decision: spec.Decision{Decision: spec.DecisionContinue, Reasons: []string{"checks failing"}},
		Signals: spec.Signals{Progress: "fp1", Score: 50}, RemainingWork: []string{"write tests"}}
	checks := []spec.CheckResult{{Name: "tests", Type: spec.CheckCommand, Passed: false, Message: "exit 1"}}
	refs := spec.Artifacts{Created: []spec.Ref{{Type: "document", ID: "d1", Path: "notes.md"}}}
	f.tx(func(tx spec.Tx) error {
		if err := tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: "r", Iteration: 1, Attempt: 1, Status: spec.IterRunning,
			StartedAt: tx.Now()}); err != nil {
			return err
		}
		return tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: "r", Iteration: 1, Attempt: 1, Status: spec.IterSucceeded,
			StartedAt: tx.Now(), EndedAt: tx.Now(), Summary: "did things", GateRecord: gate, CheckResults: checks,
			ArtifactRefs: refs, Metrics: spec.Metrics{Iterations: 1, ToolCallsTotal: 3}})
	})
	f.tx(func(tx spec.Tx) error {
		return tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: "r", Iteration: 2, Attempt: 1, Status: spec.IterRunning, StartedAt: tx.Now()})
	})
	its, err := f.s.ListIterations(f.ctx, u.ID, "r")
	if err != nil || len(its) != 2 {
		t.Fatalf("iterations: %d (%v)", len(its), err)
	}
	it := its[0]
	if it.Status != spec.IterSucceeded || it.Summary != "did things" || it.Metrics.ToolCallsTotal != 3 {
		t.Errorf("iteration 1 = %+v", it)
	}
	if it.GateRecord == nil || it.GateRecord.Decision.Decision != spec.DecisionContinue || it.GateRecord.Signals.Progress != "fp1" ||
		fmt.Sprint(it.GateRecord.RemainingWork) != "[write tests]" {
		t.Errorf("gate = %+v", it.GateRecord)
	}
	if len(it.CheckResults) != 1 || it.CheckResults[0].Name != "tests" || it.CheckResults[0].Passed {
		t.Errorf("checks = %+v", it.CheckResults)
	}
	if len(it.ArtifactRefs.Created) != 1 || it.ArtifactRefs.Created[0].Path != "notes.md" {
		t.Errorf("artifacts = %+v", it.ArtifactRefs)
	}
	if its[1].GateRecord != nil || its[1].CheckResults != nil || its[1].Status != spec.IterRunning {
		t.Errorf("a running iteration has gate %+v checks %+v", its[1].GateRecord, its[1].CheckResults)
	}
	f.tx(func(tx spec.Tx) error {
		_, err := tx.FindIteration(f.ctx, "r", 9)
		wantCode(t, "FindIteration of a missing iteration", err, spec.ENOTFOUND)
		return nil
	})
	s.pastIterations(f, gate, checks)
}

// pastIterations: what a starting iteration is given of earlier ones skips
// running rows, stops below its own number and carries the newest's checks.
func (s suite) pastIterations(f *fixture, gate *spec.GateRecord, checks []spec.CheckResult) {
	t := f.t
	stop := &spec.GateRecord{Decision: spec.Decision{Decision: spec.DecisionWait}, Signals: spec.Signals{Progress: "fp3"}}
	f.tx(func(tx spec.Tx) error {
		return tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: "r", Iteration: 3, Attempt: 1, Status: spec.IterFailed,
			StartedAt: tx.Now(), EndedAt: tx.Now(), Summary: "third", GateRecord: stop, CheckResults: checks})
	})
	f.tx(func(tx spec.Tx) error {
		past, err := f.s.PastIterations(f.ctx, "r", 4, 20)
		if err != nil || len(past) != 2 || past[0].Iteration != 3 || past[1].Iteration != 1 {
			t.Fatalf("past iterations below 4: %+v (%v)", past, err)
		}
		if p := past[0]; p.Summary != "third" || decodeGate(t, p.Gate).Decision.Decision != spec.DecisionWait ||
			len(decodeChecks(t, p.Checks)) != 1 || decodeChecks(t, p.Checks)[0].Name != "tests" {
			t.Errorf("newest past iteration = %+v", p)
		}
		if p := past[1]; p.Summary != "did things" || decodeGate(t, p.Gate).Signals.Progress != gate.Signals.Progress || p.Checks != nil {
			t.Errorf("older past iteration = %+v (checks only for the newest)", p)
		}
		past, err = f.s.PastIterations(f.ctx, "r", 3, 20)
		if err != nil || len(past) != 1 || past[0].Iteration != 1 || len(decodeChecks(t, past[0].Checks)) != 1 ||
			fmt.Sprint(decodeGate(t, past[0].Gate).RemainingWork) != "[write tests]" {
			t.Errorf("past iterations below 3: %+v (%v)", past, err)
		}
		past, err = f.s.PastIterations(f.ctx, "r", 4, 1)
		if err != nil || len(past) != 1 || past[0].Iteration != 3 {
			t.Errorf("last past iteration below 4: %+v (%v)", past, err)
		}
		past, err = f.s.PastIterations(f.ctx, "r", 1, 20)
		if err != nil || len(past) != 0 {
			t.Errorf("past iterations below 1: %+v (%v)", past, err)
		}
		return nil
	})
}

func decodeGate(t *testing.T, raw json.RawMessage) spec.GateRecord {
	t.Helper()
	var g spec.GateRecord
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Errorf("gate %q: %v", raw, err)
	}
	return g
}

func decodeChecks(t *testing.T, raw json.RawMessage) []spec.CheckResult {
	t.Helper()
	var c []spec.CheckResult
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Errorf("checks %q: %v", raw, err)
	}
	return c
}

func (s suite) documents(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	f.run(u.ID, "r1")
	f.run(u.ID, "r2")
	doc := &spec.Document{RunID: "r1", Path: "notes/drivers.md", Title: "SQLite drivers", Content: "modernc is a pure Go translation"}
	var created bool
	f.tx(func(tx spec.Tx) (err error) {
		created, err = tx.PutDocument(f.ctx, doc)
		return err
	})
	if !created || doc.ID == "" || doc.UserID != u.ID || doc.Kind == "" {
		t.Fatalf("first put: created %v, doc %+v", created, doc)
	}
	upd := &spec.Document{RunID: "r1", Path: "notes/drivers.md", Title: "SQLite drivers", Content: "modernc and mattn compared", Iteration: 2}
	f.tx(func(tx spec.Tx) (err error) {
		created, err = tx.PutDocument(f.ctx, upd)
		return err
	})
	if created || upd.ID != doc.ID {
		t.Errorf("second put at the same path: created %v, id %s want %s", created, upd.ID, doc.ID)
	}
	f.tx(func(tx spec.Tx) error {
		_, err := tx.PutDocument(f.ctx, &spec.Document{RunID: "r2", Path: "other.md", Title: "Other", Content: "mattn uses cgo"})
		return err
	})
	got, err := f.s.FindDocument(f.ctx, u.ID, doc.ID)
	if err != nil || got.Content != "modernc and mattn compared" || got.Iteration != 2 {
		t.Errorf("document after update = %+v (%v)", got, err)
	}
	docs, err := f.s.ListRunDocuments(f.ctx, u.ID, "r1")
	if err != nil || len(docs) != 1 {
		t.Errorf("r1 documents: %d (%v)", len(docs), err)
	}
	hits, err := f.s.SearchDocuments(f.ctx, u.ID, "", "mattn", 10)
	if err != nil || len(hits) != 2 {
		t.Errorf("search over all runs: %d hits (%v)", len(hits), err)
	}
	hits, err = f.s.SearchDocuments(f.ctx, u.ID, "r2", "mattn", 10)
	if err != nil || len(hits) != 1 || hits[0].Document.RunID != "r2" {
		t.Errorf("search in r2: %+v (%v)", hits, err)
	}
	hits, err = f.s.SearchDocuments(f.ctx, u.ID, "", `modernc" OR "x`, 10)
	if err != nil || len(hits) != 0 {
		t.Errorf("query syntax in user input must be literal: %d hits (%v)", len(hits), err)
	}
	_, err = f.s.SearchDocuments(f.ctx, u.ID, "", "  ", 10)
	wantCode(t, "an empty search", err, spec.EINVALID)
	f.tx(func(tx spec.Tx) error {
		_, err := tx.PutDocument(f.ctx, &spec.Document{RunID: "missing", Path: "x.md"})
		wantCode(t, "a document in a missing run", err, spec.ENOTFOUND)
		return nil
	})
}

// summarySearch: the SQLite store indexes iteration summaries for search in
// batches, later than it writes them; a search through the store still
// finds every summary committed before it, with the content it has then,
// on both stores.
func (s suite) summarySearch(t *testing.T) {
	f := s.fixture(t)
	u := f.user("summaries@example.com")
	f.run(u.ID, "r1")
	f.run(u.ID, "r2")
	put := func(runID, path, content string) {
		f.tx(func(tx spec.Tx) error {
			_, err := tx.PutDocument(f.ctx, &spec.Document{RunID: runID, Path: path, Kind: spec.DocSummary,
				Title: "Iteration summary", Content: content})
			return err
		})
	}
	find := func(query string) []string {
		t.Helper()
		hits, err := f.s.SearchDocuments(f.ctx, u.ID, "", query, 50)
		if err != nil {
			t.Fatalf("search %q: %v", query, err)
		}
		var paths []string
		for _, h := range hits {
			paths = append(paths, h.Document.RunID+":"+h.Document.Path)
		}
		slices.Sort(paths)
		return paths
	}
	put("r1", "iterations/001-summary.md", "Benchmarked the walrus parser.")
	if got := find("walrus"); !slices.Equal(got, []string{"r1:iterations/001-summary.md"}) {
		t.Errorf("a summary just written: search found %v", got)
	}
	page, err := f.s.ListRuns(f.ctx, u.ID, spec.RunFilter{Query: "walrus"})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != "r1" {
		t.Errorf("runs whose documents hold a summary's word: %+v (%v)", page, err)
	}

	// Written after a search indexed what waited, and updated before the
	// next: the update's content is what is found.
	put("r2", "iterations/001-summary.md", "Measured the narwhal cache.")
	put("r2", "iterations/001-summary.md", "Measured the octopus cache.")
	if got := find("narwhal"); len(got) != 0 {
		t.Errorf("an updated summary's old content is still found: %v", got)
	}
	if got := find("octopus"); !slices.Equal(got, []string{"r2:iterations/001-summary.md"}) {
		t.Errorf("an updated summary's content: search found %v", got)
	}
	// And updated once indexed.
	put("r1", "iterations/001-summary.md", "Benchmarked the penguin parser.")
	if got := find("walrus"); len(got) != 0 {
		t.Errorf("an indexed summary's old content is still found after its update: %v", got)
	}
	if got := find("penguin"); !slices.Equal(got, []string{"r1:iterations/001-summary.md"}) {
		t.Errorf("an indexed summary's new content: search found %v", got)
	}

	// Many summaries (more than the SQLite store's batch) are all found,
	// once each.
	var want []string
	for i := range 40 {
		p := fmt.Sprintf("iterations/%03d-summary.md", i+2)
		put("r1", p, fmt.Sprintf("Step %d of the kestrel plan.", i))
		want = append(want, "r1:"+p)
	}
	slices.Sort(want)
	if got := find("kestrel"); !slices.Equal(got, want) {
		t.Errorf("40 summaries: search found %d: %v", len(got), got)
	}
	if got := find("kestrel plan"); len(got) != 40 {
		t.Errorf("40 summaries, two words: search found %d", len(got))
	}
}

func (s suite) documentsOutside(t *testing.T) {
	f := s.fixture(t)
	u, other := f.user("a@example.com"), f.user("b@example.com")
	f.run(u.ID, "r1")
	f.run(u.ID, "r2")
	paths := []string{"", "iterations", "iterations/001-summary.md", "iterations/sub/x.md", "iterationsX.md", "iterations-old/a.md",
		"Iterations/x.md", "scratchpad.md", "scratchpad", "scratchpad/001.md", "notes/a.md", "notes/deep/c.md", "notes/z.md", "notes.md",
		"notes0", "é", "é/x.md", "éa.md"}
	f.tx(func(tx spec.Tx) error {
		for _, p := range paths {
			if _, err := tx.PutDocument(f.ctx, &spec.Document{RunID: "r1", Path: p, Title: "t " + p, Content: "c " + p}); err != nil {
				return err
			}
		}
		_, err := tx.PutDocument(f.ctx, &spec.Document{RunID: "r2", Path: "notes/b.md"})
		return err
	})
	list := func(folders ...string) []string {
		t.Helper()
		docs, err := f.s.ListRunDocumentsOutside(f.ctx, u.ID, "r1", folders...)
		if err != nil {
			t.Fatalf("ListRunDocumentsOutside %q: %v", folders, err)
		}
		var got []string
		for _, d := range docs {
			if d.RunID != "r1" || d.Content != "c "+d.Path || d.Title != "t "+d.Path {
				t.Errorf("document %+v", d)
			}
			got = append(got, d.Path)
		}
		slices.Sort(got) // the order of paths is the database's collation
		return got
	}
	all := slices.Sorted(slices.Values(paths))
	if got := list(); !slices.Equal(got, all) {
		t.Errorf("no folders left out: %q, want %q", got, all)
	}
	want := []string{"", "Iterations/x.md", "iterations", "iterations-old/a.md", "iterationsX.md", "notes/a.md", "notes/deep/c.md",
		"notes/z.md", "notes.md", "notes0", "scratchpad", "scratchpad.md", "é", "éa.md"}
	slices.Sort(want)
	if got := list("iterations", "scratchpad", "é"); !slices.Equal(got, want) {
		t.Errorf("left out iterations/, scratchpad/ and é/: %q, want %q", got, want)
	}
	// A folder inside another left out, named in either order, and alone.
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(p string) bool { return slices.Contains(drop, p) })
	}
	for _, folders := range [][]string{{"notes", "notes/deep"}, {"notes/deep", "notes"}} {
		if got, want := list(folders...), without("notes/a.md", "notes/deep/c.md", "notes/z.md"); !slices.Equal(got, want) {
			t.Errorf("left out %q: %q, want %q", folders, got, want)
		}
	}
	if got, want := list("notes/deep"), without("notes/deep/c.md"); !slices.Equal(got, want) {
		t.Errorf("left out notes/deep/: %q, want %q", got, want)
	}
	if err := f.s.ReadTx(f.ctx, func(r spec.ReadStore) error {
		docs, err := r.ListRunDocumentsOutside(f.ctx, u.ID, "r1", "notes")
		if err != nil || len(docs) != len(paths)-3 {
			t.Errorf("in a read transaction, outside notes/: %d documents (%v), want %d", len(docs), err, len(paths)-3)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.ListRunDocumentsOutside(f.ctx, other.ID, "r1", "iterations")
	wantCode(t, "another user's run", err, spec.ENOTFOUND)
	_, err = f.s.ListRunDocumentsOutside(f.ctx, u.ID, "missing")
	wantCode(t, "a missing run", err, spec.ENOTFOUND)
}

func (s suite) tasks(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	f.run(u.ID, "r")
	var tasks []*spec.Task
	f.tx(func(tx spec.Tx) error {
		for _, title := range []string{"first", "second", "third"} {
			task := &spec.Task{RunID: "r", Title: title}
			if err := tx.InsertTask(f.ctx, task); err != nil {
				return err
			}
			tasks = append(tasks, task)
		}
		tasks[1].Status, tasks[1].Passes = spec.TaskDone, true
		return tx.UpdateTask(f.ctx, tasks[1])
	})
	got, err := f.s.ListTasks(f.ctx, u.ID, "r")
	if err != nil || len(got) != 3 {
		t.Fatalf("tasks: %d (%v)", len(got), err)
	}
	for i, want := range []string{"first", "second", "third"} {
		if got[i].Title != want {
			t.Errorf("task %d = %q, want %q", i, got[i].Title, want)
		}
	}
	if got[0].Status != spec.TaskTodo || got[1].Status != spec.TaskDone || !got[1].Passes {
		t.Errorf("statuses = %s %s passes %v", got[0].Status, got[1].Status, got[1].Passes)
	}
	f.tx(func(tx spec.Tx) error {
		err := tx.UpdateTask(f.ctx, &spec.Task{ID: "missing", RunID: "r", Title: "x", Status: spec.TaskTodo})
		wantCode(t, "updating a missing task", err, spec.ENOTFOUND)
		return nil
	})
}

func (s suite) inbox(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	f.run(u.ID, "r")
	var last int64
	f.tx(func(tx spec.Tx) error {
		for _, body := range []string{"yes", "and also this"} {
			it := &spec.InboxItem{RunID: "r", Kind: spec.InboxMessage, Body: body}
			if err := tx.InsertInbox(f.ctx, it); err != nil {
				return err
			}
			last = it.ID
		}
		return nil
	})
	f.tx(func(tx spec.Tx) error {
		pending, err := f.s.PendingInbox(f.ctx, "r")
		if err != nil {
			return err
		}
		if len(pending) != 2 || pending[0].Body != "yes" {
			t.Errorf("pending = %+v", pending)
		}
		return tx.ConsumeInbox(f.ctx, "r", last, 4)
	})
	f.tx(func(tx spec.Tx) error {
		pending, err := f.s.PendingInbox(f.ctx, "r")
		if len(pending) != 0 {
			t.Errorf("pending after consume = %+v", pending)
		}
		return err
	})
	all, err := f.s.ListInbox(f.ctx, u.ID, "r")
	if err != nil || len(all) != 2 || all[1].ConsumedIteration != 4 || all[1].ConsumedAt.IsZero() {
		t.Errorf("inbox = %+v (%v)", all, err)
	}

	// A transaction reads the inbox as it left it: what it consumed is no
	// longer pending, what it inserted is (an iteration beginning in the
	// transaction that finished the one before reads it so).
	f.tx(func(tx spec.Tx) error {
		first := &spec.InboxItem{RunID: "r", Kind: spec.InboxMessage, Body: "first"}
		if err := tx.InsertInbox(f.ctx, first); err != nil {
			return err
		}
		if err := tx.ConsumeInbox(f.ctx, "r", first.ID, 5); err != nil {
			return err
		}
		second := &spec.InboxItem{RunID: "r", Kind: spec.InboxAnswer, Body: "second"}
		if err := tx.InsertInbox(f.ctx, second); err != nil {
			return err
		}
		pending, err := tx.PendingInbox(f.ctx, "r")
		if err != nil {
			return err
		}
		if len(pending) != 1 || pending[0].ID != second.ID || pending[0].Body != "second" || pending[0].Kind != spec.InboxAnswer {
			t.Errorf("pending inside the transaction = %+v, want the second item only", pending)
		}
		return nil
	})
}

func (s suite) notifications(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	f.run(u.ID, "r")
	var ids []int64
	f.tx(func(tx spec.Tx) error {
		for i := range 3 {
			n := &spec.Notification{UserID: u.ID, RunID: "r", Kind: "run_stopped", Title: fmt.Sprint("n", i), ActionURL: "/runs/r"}
			if err := tx.InsertNotification(f.ctx, n); err != nil {
				return err
			}
			ids = append(ids, n.ID)
		}
		return nil
	})
	list, err := f.s.ListNotifications(f.ctx, u.ID, 0, 10)
	if err != nil || len(list) != 3 || list[0].ID != ids[2] {
		t.Fatalf("notifications newest first: %+v (%v)", list, err)
	}
	older, err := f.s.ListNotifications(f.ctx, u.ID, ids[2], 10)
	if err != nil || len(older) != 2 {
		t.Errorf("notifications before the newest: %d (%v)", len(older), err)
	}
	if n, _ := f.s.CountUnread(f.ctx, u.ID); n != 3 {
		t.Errorf("unread = %d, want 3", n)
	}
	if err := f.s.MarkNotificationRead(f.ctx, u.ID, ids[0]); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.s.CountUnread(f.ctx, u.ID); n != 2 {
		t.Errorf("unread after marking one = %d, want 2", n)
	}
	if err := f.s.MarkNotificationRead(f.ctx, u.ID, 0); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.s.CountUnread(f.ctx, u.ID); n != 0 {
		t.Errorf("unread after marking all = %d, want 0", n)
	}
	wantCode(t, "marking a missing notification", f.s.MarkNotificationRead(f.ctx, u.ID, 1<<40), spec.ENOTFOUND)
}

func (s suite) tokens(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	_, err := f.s.CreateUser(f.ctx, "a@example.com", "hash", false)
	wantCode(t, "a second user with the same email", err, spec.ECONFLICT)
	secret, tok, err := f.s.CreateAPIToken(f.ctx, u.ID, "laptop")
	if err != nil || secret == "" || tok.ID == 0 {
		t.Fatalf("create token: %v", err)
	}
	got, err := f.s.FindUserByToken(f.ctx, secret)
	if err != nil || got.ID != u.ID {
		t.Fatalf("find by token: %+v (%v)", got, err)
	}
	_, err = f.s.FindUserByToken(f.ctx, secret+"x")
	wantCode(t, "a wrong token", err, spec.EUNAUTHORIZED)
	if err := f.s.RevokeAPIToken(f.ctx, u.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	_, err = f.s.FindUserByToken(f.ctx, secret)
	wantCode(t, "a revoked token", err, spec.EUNAUTHORIZED)
	wantCode(t, "revoking twice", f.s.RevokeAPIToken(f.ctx, u.ID, tok.ID), spec.ENOTFOUND)
}

func (s suite) sessions(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	secret, sess, err := f.s.CreateSession(f.ctx, u.ID, time.Hour)
	if err != nil || secret == "" || sess.CSRFToken == "" {
		t.Fatalf("create session: %+v (%v)", sess, err)
	}
	got, gotUser, err := f.s.FindSession(f.ctx, secret)
	if err != nil || gotUser.ID != u.ID || got.CSRFToken != sess.CSRFToken {
		t.Fatalf("find session: %+v %+v (%v)", got, gotUser, err)
	}
	expired, _, err := f.s.CreateSession(f.ctx, u.ID, -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.s.FindSession(f.ctx, expired)
	wantCode(t, "an expired session", err, spec.EUNAUTHORIZED)
	if err := f.s.DeleteSession(f.ctx, secret); err != nil {
		t.Fatal(err)
	}
	_, _, err = f.s.FindSession(f.ctx, secret)
	wantCode(t, "a deleted session", err, spec.EUNAUTHORIZED)
}

func (s suite) liveCredentials(t *testing.T) {
	f := s.fixture(t)
	u := f.user("a@example.com")
	tokA, a, err := f.s.CreateAPIToken(f.ctx, u.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	tokB, _, err := f.s.CreateAPIToken(f.ctx, u.ID, "b")
	if err != nil {
		t.Fatal(err)
	}
	sessA, _, err := f.s.CreateSession(f.ctx, u.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sessB, _, err := f.s.CreateSession(f.ctx, u.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired, _, err := f.s.CreateSession(f.ctx, u.ID, -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []string{hashSecret(tokA), hashSecret(tokB), hashSecret("hw_never-issued")}
	sessions := []string{hashSecret(sessA), hashSecret(sessB), hashSecret(expired), hashSecret("never-issued")}
	check := func(what string, wantTokens, wantSessions []bool) {
		t.Helper()
		lt, ls, err := f.s.LiveCredentials(f.ctx, tokens, sessions)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i, h := range tokens {
			if lt[h] != wantTokens[i] {
				t.Errorf("%s: token %d live %v, want %v", what, i, lt[h], wantTokens[i])
			}
		}
		for i, h := range sessions {
			if ls[h] != wantSessions[i] {
				t.Errorf("%s: session %d live %v, want %v", what, i, ls[h], wantSessions[i])
			}
		}
		if len(lt)+len(ls) != count(wantTokens)+count(wantSessions) {
			t.Errorf("%s: live %v %v holds more than was asked", what, lt, ls)
		}
	}
	check("fresh", []bool{true, true, false}, []bool{true, true, false, false})
	if err := f.s.RevokeAPIToken(f.ctx, u.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.s.DeleteSession(f.ctx, sessA); err != nil {
		t.Fatal(err)
	}
	check("after revoking a token and deleting a session", []bool{false, true, false}, []bool{false, true, false, false})
	// A token hash is not a session and the other way round.
	lt, ls, err := f.s.LiveCredentials(f.ctx, []string{hashSecret(sessB)}, []string{hashSecret(tokB)})
	if err != nil || len(lt) != 0 || len(ls) != 0 {
		t.Errorf("crossed kinds: %v %v (%v)", lt, ls, err)
	}
	lt, ls, err = f.s.LiveCredentials(f.ctx, nil, nil)
	if err != nil || len(lt) != 0 || len(ls) != 0 {
		t.Errorf("nothing asked: %v %v (%v)", lt, ls, err)
	}
	// Many at once: the answer does not depend on how many are asked.
	many := make([]string, 0, 5000)
	for i := range 5000 {
		many = append(many, hashSecret(fmt.Sprint("hw_unknown-", i)))
	}
	many = append(many, hashSecret(tokB))
	lt, _, err = f.s.LiveCredentials(f.ctx, many, nil)
	if err != nil || len(lt) != 1 || !lt[hashSecret(tokB)] {
		t.Errorf("5001 tokens asked: %d live (%v)", len(lt), err)
	}
}

// hashSecret is the stored form of a secret: the hex SHA-256, as both
// stores keep tokens and sessions.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func (s suite) isolation(t *testing.T) {
	f := s.fixture(t)
	a, b := f.user("a@example.com"), f.user("b@example.com")
	f.run(a.ID, "ra")
	doc := &spec.Document{RunID: "ra", Path: "secret.md", Title: "Secret", Content: "plans of a"}
	var note *spec.Notification
	f.tx(func(tx spec.Tx) error {
		if _, err := tx.PutDocument(f.ctx, doc); err != nil {
			return err
		}
		note = &spec.Notification{UserID: a.ID, RunID: "ra", Kind: "run_stopped", Title: "t"}
		return tx.InsertNotification(f.ctx, note)
	})
	if _, err := f.s.AppendEvent(f.ctx, "ra", spec.EventToolCall, nil); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.FindRun(f.ctx, b.ID, "ra")
	wantCode(t, "FindRun", err, spec.ENOTFOUND)
	_, err = f.s.ListIterations(f.ctx, b.ID, "ra")
	wantCode(t, "ListIterations", err, spec.ENOTFOUND)
	_, err = f.s.ListRunEvents(f.ctx, b.ID, "ra", 0, 10)
	wantCode(t, "ListRunEvents", err, spec.ENOTFOUND)
	_, err = f.s.FindDocument(f.ctx, b.ID, doc.ID)
	wantCode(t, "FindDocument", err, spec.ENOTFOUND)
	_, err = f.s.ListRunDocuments(f.ctx, b.ID, "ra")
	wantCode(t, "ListRunDocuments", err, spec.ENOTFOUND)
	_, err = f.s.ListTasks(f.ctx, b.ID, "ra")
	wantCode(t, "ListTasks", err, spec.ENOTFOUND)
	_, err = f.s.ListInbox(f.ctx, b.ID, "ra")
	wantCode(t, "ListInbox", err, spec.ENOTFOUND)
	wantCode(t, "MarkNotificationRead", f.s.MarkNotificationRead(f.ctx, b.ID, note.ID), spec.ENOTFOUND)
	if hits, err := f.s.SearchDocuments(f.ctx, b.ID, "", "plans", 10); err != nil || len(hits) != 0 {
		t.Errorf("b's search finds a's documents: %d (%v)", len(hits), err)
	}
	if page, err := f.s.ListRuns(f.ctx, b.ID, spec.RunFilter{}); err != nil || len(page.Runs) != 0 {
		t.Errorf("b's run list: %+v (%v)", page, err)
	}
	if evs, err := f.s.ListUserEvents(f.ctx, b.ID, 0, 10); err != nil || len(evs) != 0 {
		t.Errorf("b's feed: %d (%v)", len(evs), err)
	}
	if list, err := f.s.ListNotifications(f.ctx, b.ID, 0, 10); err != nil || len(list) != 0 {
		t.Errorf("b's notifications: %d (%v)", len(list), err)
	}
}
