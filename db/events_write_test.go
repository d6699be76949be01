package db

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"homework/engine/spec"
)

// TestAppendedEventsAreWrittenBeforeTheNextStatement: a transaction's
// events take their seqs when appended and are written together before its
// next statement (which so reads them) or its commit; after the commit they
// have their ids, in append order. An append to a missing run fails at
// once, and a rolled-back transaction leaves no event and no seq used.
func TestAppendedEventsAreWrittenBeforeTheNextStatement(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	u, err := d.CreateUser(ctx, "events@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	r := newRun(t, d, u.ID, "r")
	count := func(tx spec.Tx) int {
		var n int
		if err := tx.(*Tx).Conn().QueryRow(ctx, `SELECT COUNT(*) FROM events WHERE run_id = ?`, r.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var evs []*spec.Event
	err = d.WriteTx(ctx, func(tx spec.Tx) error {
		for _, typ := range []spec.EventType{spec.EventGateDecision, spec.EventIterationCompleted} {
			e, err := tx.AppendEvent(ctx, r.ID, typ, map[string]int{"i": len(evs)})
			if err != nil {
				return err
			}
			evs = append(evs, e)
		}
		if evs[0].Seq != 1 || evs[1].Seq != 2 {
			t.Errorf("seqs at append = %d, %d; want 1, 2", evs[0].Seq, evs[1].Seq)
		}
		if n := count(tx); n != 2 {
			t.Errorf("the transaction's next statement read %d events, want 2", n)
		}
		e, err := tx.AppendEvent(ctx, r.ID, spec.EventCheckResult, nil)
		evs = append(evs, e)
		if _, err := tx.AppendEvent(ctx, "missing", spec.EventCheckResult, nil); spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Errorf("append to a missing run: %v, want ENOTFOUND", err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].ID == 0 || evs[1].ID <= evs[0].ID || evs[2].ID <= evs[1].ID || evs[2].Seq != 3 {
		t.Errorf("committed events = %+v %+v %+v; want ids in append order, seq 3 last", evs[0], evs[1], evs[2])
	}
	// The ids given out (not read back from the insert) are the rows'.
	stored, err := d.ListUserEvents(ctx, u.ID, 0, 100)
	if err != nil || len(stored) != 3 {
		t.Fatalf("stored events = %d (%v), want 3", len(stored), err)
	}
	for i, e := range stored {
		if e.ID != evs[i].ID || e.Seq != evs[i].Seq || e.Type != evs[i].Type {
			t.Errorf("stored event %d = id %d seq %d %s; the transaction gave id %d seq %d %s", i, e.ID, e.Seq, e.Type, evs[i].ID, evs[i].Seq, evs[i].Type)
		}
	}

	boom := errors.New("boom")
	err = d.WriteTx(ctx, func(tx spec.Tx) error {
		if _, err := tx.AppendEvent(ctx, r.ID, spec.EventCheckResult, nil); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("rolled-back write: %v", err)
	}
	e, err := d.AppendEvent(ctx, r.ID, spec.EventCheckResult, nil)
	if err != nil || e.Seq != 4 {
		t.Errorf("after a rollback the next event is %+v (%v); want seq 4", e, err)
	}
	all, err := d.ListUserEvents(ctx, u.ID, 0, 100)
	if err != nil || len(all) != 4 {
		t.Errorf("events = %d (%v), want 4", len(all), err)
	}
}

// TestGroupCommittedEventsGetTheirRowsIDs: events appended concurrently
// (group-committed in multi-row inserts) are given the ids of their own
// rows.
func TestGroupCommittedEventsGetTheirRowsIDs(t *testing.T) {
	ctx := context.Background()
	d, userID, runs := storeWithRuns(t, 8)
	const producers, each = 64, 10
	got := make(chan *spec.Event, producers*each)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e, err := d.AppendEvent(ctx, runs[(p+i)%len(runs)], spec.EventToolCall, map[string]int{"p": p, "i": i})
				if err != nil {
					t.Error(err)
					return
				}
				got <- e
			}
		}()
	}
	wg.Wait()
	close(got)
	stored, err := d.ListUserEvents(ctx, userID, 0, producers*each+1)
	if err != nil || len(stored) != producers*each {
		t.Fatalf("stored events = %d (%v), want %d", len(stored), err, producers*each)
	}
	byID := map[int64]*spec.Event{}
	for _, e := range stored {
		byID[e.ID] = e
	}
	for e := range got {
		s := byID[e.ID]
		if s == nil || s.RunID != e.RunID || s.Seq != e.Seq || string(s.Data) != string(e.Data) {
			t.Fatalf("appended %s #%d %s was given id %d, whose row is %+v", e.RunID, e.Seq, e.Data, e.ID, s)
		}
	}
}

// TestGroupWritesShareTheEventsCommit: GroupWriteTx writes made while
// appends are pending commit with them, each run's events taking ids in
// seq order; a write that fails fails alone, its error returned to its
// caller while the appends and writes it was grouped with still commit.
func TestGroupWritesShareTheEventsCommit(t *testing.T) {
	ctx := context.Background()
	d, userID, runs := storeWithRuns(t, 4)
	const producers, each = 32, 10
	bad := errors.New("this write fails")
	var wg sync.WaitGroup
	var mu sync.Mutex
	want := 0
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				run := runs[(p+i)%len(runs)]
				switch i % 3 {
				case 0:
					if _, err := d.AppendEvent(ctx, run, spec.EventToolCall, map[string]int{"p": p, "i": i}); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					want++
					mu.Unlock()
				case 1:
					err := d.GroupWriteTx(ctx, func(tx spec.Tx) error {
						if _, err := tx.AppendEvent(ctx, run, spec.EventLLMCall, map[string]int{"p": p, "i": i}); err != nil {
							return err
						}
						_, err := tx.AppendEvent(ctx, run, spec.EventIterationCostUpdate, map[string]int{"p": p, "i": i})
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					want += 2
					mu.Unlock()
				case 2:
					err := d.GroupWriteTx(ctx, func(tx spec.Tx) error {
						if _, err := tx.AppendEvent(ctx, run, spec.EventLLMCall, map[string]int{"p": p, "i": i}); err != nil {
							return err
						}
						return bad
					})
					if !errors.Is(err, bad) {
						t.Errorf("failing group write returned %v, want %v", err, bad)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	stored, err := d.ListUserEvents(ctx, userID, 0, 10*producers*each)
	if err != nil || len(stored) != want {
		t.Fatalf("stored events = %d (%v), want %d", len(stored), err, want)
	}
	last := map[string]int64{}
	for _, e := range stored {
		if e.Seq != last[e.RunID]+1 {
			t.Fatalf("run %s: event id %d has seq %d after seq %d", e.RunID, e.ID, e.Seq, last[e.RunID])
		}
		last[e.RunID] = e.Seq
	}
}

// TestAGroupWriteThatPanicsPanicsItsOwnCaller: a GroupWriteTx write that
// panics in the group's transaction fails the group, not its leader: the
// appends grouped with it commit, its caller panics in its own goroutine,
// and the store goes on writing.
func TestAGroupWriteThatPanicsPanicsItsOwnCaller(t *testing.T) {
	ctx := context.Background()
	d, userID, runs := storeWithRuns(t, 1)
	run := runs[0]
	const appends = 32
	var wg sync.WaitGroup
	for i := range appends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.AppendEvent(ctx, run, spec.EventToolCall, map[string]int{"i": i}); err != nil {
				t.Error(err)
			}
		}()
	}
	panicked := make(chan any, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() { panicked <- recover() }()
		d.GroupWriteTx(ctx, func(tx spec.Tx) error {
			if _, err := tx.AppendEvent(ctx, run, spec.EventLLMCall, nil); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	wg.Wait()
	if p := <-panicked; p != "boom" {
		t.Errorf("the caller recovered %v, want its write's panic", p)
	}
	if _, err := d.AppendEvent(ctx, run, spec.EventToolResult, nil); err != nil {
		t.Fatalf("append after the panic: %v", err)
	}
	evs, err := d.ListRunEvents(ctx, userID, run, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Type == spec.EventLLMCall {
			t.Errorf("the panicking write's event #%d was stored", e.Seq)
		}
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, e.Seq)
		}
	}
	if want := appends + 1; countType(evs, spec.EventToolCall)+countType(evs, spec.EventToolResult) != want {
		t.Errorf("stored %d appends, want %d", len(evs), want)
	}
}

// waitPending yields until n appends or group writes wait for the leader.
func waitPending(d *DB, n int) {
	for {
		d.pendingMu.Lock()
		pending := len(d.pending)
		d.pendingMu.Unlock()
		if pending >= n {
			return
		}
		runtime.Gosched()
	}
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

// storeWithRuns opens a store with one user owning n runs (r0, r1, …).
func storeWithRuns(t *testing.T, n int) (*DB, int64, []string) {
	t.Helper()
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	u, err := d.CreateUser(context.Background(), "events@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	runs := make([]string, n)
	for i := range runs {
		runs[i] = newRun(t, d, u.ID, fmt.Sprint("r", i)).ID
	}
	return d, u.ID, runs
}

// TestAppendsReadiedWhileTheLeaderWritesJoinItsCommit: callers that become
// ready to append while a group commit's rows go in (as the callers the
// last commit woke do) get to append before it commits, and their events
// commit with it, once, in order. One processor makes "ready but not yet
// run" last until the leader yields; a round whose yield happens to run
// the leader first (the scheduler polls its global queue now and then) is
// tried again.
func TestAppendsReadiedWhileTheLeaderWritesJoinItsCommit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	var mu sync.Mutex
	var commits [][]*spec.Event
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"), func(o *Options) {
		o.OnEvents = func(evs []*spec.Event) {
			mu.Lock()
			commits = append(commits, evs)
			mu.Unlock()
		}
	})
	u, err := d.CreateUser(ctx, "events@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	run := newRun(t, d, u.ID, "r").ID
	const late = 8
	joined := false
	for round := 0; round < 5 && !joined; round++ {
		mu.Lock()
		commits = nil
		mu.Unlock()
		var wg sync.WaitGroup
		started := false
		err := d.GroupWriteTx(ctx, func(tx spec.Tx) error {
			if !started {
				// Ready to run, but not running while this goroutine
				// holds the one processor.
				started = true
				for i := range late {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := d.AppendEvent(ctx, run, spec.EventToolCall, map[string]int{"i": i}); err != nil {
							t.Error(err)
						}
					}()
				}
			}
			_, err := tx.AppendEvent(ctx, run, spec.EventLLMCall, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		mu.Lock()
		joined = len(commits) == 1 && len(commits[0]) == late+1
		mu.Unlock()
	}
	if !joined {
		t.Errorf("appends readied during the commit were committed apart from it in every round (last: %d commits)", len(commits))
	}
	evs, err := d.ListRunEvents(ctx, u.ID, run, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, e.Seq)
		}
	}
}

// TestAGroupWhoseInsertFailsIsRetriedAlone: a group commit's event insert
// that fails (here on a seq another writer took behind the store's seq
// cache) fails that group's transaction, rolled back whole, and nothing
// else: a lone append reports the failure, a group holding a GroupWriteTx
// write is made again caller by caller (the append then reloading its
// run's seq), and the writer goes on with gap-free seqs.
func TestAGroupWhoseInsertFailsIsRetriedAlone(t *testing.T) {
	ctx := context.Background()
	d, userID, runs := storeWithRuns(t, 2)
	run, other := runs[0], runs[1]
	// takeBehindTheCache writes run's next event straight into the table,
	// so the store's cached next seq for run is taken.
	takeBehindTheCache := func() {
		t.Helper()
		if _, err := d.AppendEvent(ctx, run, spec.EventToolCall, nil); err != nil {
			t.Fatal(err)
		}
		err := d.WriteTx(ctx, func(tx spec.Tx) error {
			_, err := tx.(*Tx).SQL.ExecContext(ctx, `INSERT INTO events (run_id, user_id, seq, type, data, created_at)
				SELECT run_id, user_id, MAX(seq) + 1, 'tool_call', '{}', 0 FROM events WHERE run_id = ?`, run)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	takeBehindTheCache()
	if _, err := d.AppendEvent(ctx, run, spec.EventToolResult, nil); err == nil {
		t.Fatal("an append on a taken seq succeeded")
	}
	if _, err := d.AppendEvent(ctx, run, spec.EventToolResult, nil); err != nil {
		t.Fatalf("the append after the failed one: %v", err)
	}

	// A group of a write and an append on a taken seq: the leader takes
	// both once they are pending (it waits for the writer held here).
	takeBehindTheCache()
	d.writeMu.Lock()
	var wg sync.WaitGroup
	wg.Add(2)
	writes := 0
	go func() {
		defer wg.Done()
		err := d.GroupWriteTx(ctx, func(tx spec.Tx) error {
			writes++
			_, err := tx.AppendEvent(ctx, other, spec.EventLLMCall, nil)
			return err
		})
		if err != nil {
			t.Errorf("the group write: %v", err)
		}
	}()
	waitPending(d, 1)
	go func() {
		defer wg.Done()
		if _, err := d.AppendEvent(ctx, run, spec.EventToolResult, nil); err != nil {
			t.Errorf("the grouped append, made again alone: %v", err)
		}
	}()
	waitPending(d, 2)
	d.writeMu.Unlock()
	wg.Wait()
	if writes != 2 {
		t.Errorf("the group write ran %d times, want 2 (in the group, then alone)", writes)
	}

	if err := d.WriteTx(ctx, func(tx spec.Tx) error {
		_, err := tx.AppendEvent(ctx, other, spec.EventToolCall, nil)
		return err
	}); err != nil {
		t.Fatalf("a write transaction after the failed groups: %v", err)
	}
	evs, err := d.ListUserEvents(ctx, userID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	for _, e := range evs {
		if e.Seq != last[e.RunID]+1 {
			t.Fatalf("run %s: event id %d has seq %d after seq %d", e.RunID, e.ID, e.Seq, last[e.RunID])
		}
		last[e.RunID] = e.Seq
	}
	if last[run] != 6 || last[other] != 2 {
		t.Errorf("runs' last seqs = %d and %d, want 6 (two appends, two written behind the cache, two retried) and 2", last[run], last[other])
	}
}
