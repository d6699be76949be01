package pg_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/pg"
	"homework/db/pg/pgtest"
	"homework/db/storetest"
	"homework/engine/spec"
)

func open(t *testing.T, url string, onEvents func([]*spec.Event)) *pg.DB {
	t.Helper()
	d, err := pg.Open(context.Background(), pg.Options{URL: url, OnEvents: onEvents})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// testRun is a queued script run of the user, with id.
func testRun(id string, userID int64) *spec.Run {
	return &spec.Run{ID: id, UserID: userID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
		Config: []byte(`{}`), Status: spec.StatusQueued}
}

// insertRuns inserts a testRun of the user for each id, each in a
// transaction of its own.
func insertRuns(t *testing.T, d *pg.DB, userID int64, ids ...string) {
	t.Helper()
	for _, id := range ids {
		run := testRun(id, userID)
		if err := d.WriteTx(context.Background(), func(tx spec.Tx) error { return tx.InsertRun(context.Background(), run) }); err != nil {
			t.Fatal(err)
		}
	}
}

// userWithRuns creates a user with email and queued runs of it with ids.
func userWithRuns(t *testing.T, d *pg.DB, email string, ids ...string) *spec.User {
	t.Helper()
	u, err := d.CreateUser(context.Background(), email, "h", false)
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, d, u.ID, ids...)
	return u
}

// TestConformance runs the store conformance suite against PostgreSQL.
func TestConformance(t *testing.T) {
	pgtest.ServerURL(t)
	storetest.Run(t, func(t *testing.T) spec.Store {
		return open(t, pgtest.NewDatabase(t), nil)
	})
}

// TestConformanceOrderedByLanguage runs the suite on a database whose
// collation orders text by language, not by bytes, as a server's default
// often does.
func TestConformanceOrderedByLanguage(t *testing.T) {
	pgtest.ServerURL(t)
	storetest.Run(t, func(t *testing.T) spec.Store {
		return open(t, pgtest.NewDatabaseOrderedByLanguage(t), nil)
	})
}

// TestTwoStoresShareSeqsAndEvents appends through two stores on one
// database, as two processes would: seqs stay gap-free and unique, and each
// store's listener receives every event in commit order, its own and the
// other's.
func TestTwoStoresShareSeqsAndEvents(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	type sink struct {
		mu  sync.Mutex
		evs []*spec.Event
		got chan struct{}
	}
	newSink := func() *sink { return &sink{got: make(chan struct{}, 1000)} }
	publish := func(s *sink) func([]*spec.Event) {
		return func(evs []*spec.Event) {
			s.mu.Lock()
			s.evs = append(s.evs, evs...)
			s.mu.Unlock()
			for range evs {
				s.got <- struct{}{}
			}
		}
	}
	sa, sb := newSink(), newSink()
	a, b := open(t, url, publish(sa)), open(t, url, publish(sb))
	u, err := a.CreateUser(ctx, "a@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, a, u.ID, "r")
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := a
			if i%2 == 1 {
				d = b
			}
			if _, err := d.AppendEvent(ctx, "r", spec.EventToolCall, map[string]int{"i": i}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, s := range []*sink{sa, sb} {
		for range n {
			<-s.got
		}
		s.mu.Lock()
		for i, e := range s.evs {
			if e.Seq != int64(i+1) || e.UserID != u.ID {
				t.Fatalf("listener event %d has seq %d user %d: not every event in commit order", i, e.Seq, e.UserID)
			}
		}
		s.mu.Unlock()
	}
}

// TestTransactionsOfSeveralEventsKeepSeqsGapFree appends through two
// stores on one database, as two processes would, in transactions that
// each append several events to two runs, while others roll back after
// appending: each run's seqs are 1..n with no gap or repeat, and a later
// append takes n+1. A transaction advances a run's counter by its events
// as it commits, and numbers them back from it.
func TestTransactionsOfSeveralEventsKeepSeqsGapFree(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	a, b := open(t, url, nil), open(t, url, nil)
	u, err := a.CreateUser(ctx, "several@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, a, u.ID, "r1", "r2")
	errRollBack := errors.New("roll back")
	const txs = 20
	var wg sync.WaitGroup
	for i := range txs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := a
			if i%2 == 1 {
				d = b
			}
			err := d.WriteTx(ctx, func(tx spec.Tx) error {
				// Runs in one order in every transaction, as the
				// engine's are: r1 then r2.
				for _, run := range []string{"r1", "r1", "r1", "r2", "r2"} {
					if _, err := tx.AppendEvent(ctx, run, spec.EventToolCall, map[string]int{"tx": i}); err != nil {
						return err
					}
				}
				if i%4 == 3 {
					return errRollBack
				}
				return nil
			})
			if err != nil && !errors.Is(err, errRollBack) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	committed := txs - txs/4
	last := func(d *pg.DB, run string, want int64) {
		t.Helper()
		var e *spec.Event
		if err := d.WriteTx(ctx, func(tx spec.Tx) (err error) {
			e, err = tx.AppendEvent(ctx, run, spec.EventToolCall, nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if e.Seq != want {
			t.Fatalf("%s: the next append took seq %d, want %d", run, e.Seq, want)
		}
	}
	last(b, "r1", int64(3*committed+1))
	last(a, "r2", int64(2*committed+1))
	for run, n := range map[string]int{"r1": 3*committed + 1, "r2": 2*committed + 1} {
		rows, err := a.Pool().Query(ctx, `SELECT seq FROM events WHERE run_id = $1 ORDER BY seq`, run)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for rows.Next() {
			var s int64
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(seqs) != n {
			t.Fatalf("%s has %d events, want %d", run, len(seqs), n)
		}
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("%s: event %d has seq %d: a gap or a repeat in %v", run, i+1, s, seqs)
			}
		}
	}
}

// TestAnAppendToAMissingRunCommitsNothing: a transaction that appends to a
// run that is not there (never was, or was deleted after this process
// learnt its user) fails with ENOTFOUND and commits none of its writes,
// although a transaction with events commits in the round trip that
// writes them.
func TestAnAppendToAMissingRunCommitsNothing(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	d := open(t, url, nil)
	u, err := d.CreateUser(ctx, "missing@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteTx(ctx, func(tx spec.Tx) error {
		if err := tx.InsertRun(ctx, testRun("gone", u.ID)); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, "gone", spec.EventToolCall, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, `DELETE FROM runs WHERE id = 'gone'`); err != nil {
		t.Fatal(err)
	}
	for _, missing := range []string{"never", "gone"} {
		err := d.WriteTx(ctx, func(tx spec.Tx) error {
			// Only the missing run has events: its user known ("gone"),
			// the whole transaction goes in one round trip.
			if err := tx.InsertRun(ctx, testRun("with-"+missing, u.ID)); err != nil {
				return err
			}
			_, err := tx.AppendEvent(ctx, missing, spec.EventToolCall, nil)
			return err
		})
		if spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Fatalf("append to %s: %v, want ENOTFOUND", missing, err)
		}
		if _, err := d.FindRun(ctx, u.ID, "with-"+missing); spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Fatalf("the transaction that appended to %s committed its run: %v", missing, err)
		}
	}
	// The connection is usable after each: the next write commits.
	if err := d.WriteTx(ctx, func(tx spec.Tx) error {
		if err := tx.InsertRun(ctx, testRun("after", u.ID)); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, "after", spec.EventToolCall, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTheSlotLockSerialisesPromotions checks that the per-user advisory
// lock a promotion's reads take makes a second transaction wait until the
// first commits.
func TestTheSlotLockSerialisesPromotions(t *testing.T) {
	d := open(t, pgtest.NewDatabase(t), nil)
	ctx := context.Background()
	holder := holdSlotLock(t, d, 7, nil)
	second := make(chan struct{})
	go func() {
		d.WriteTx(ctx, func(tx spec.Tx) error {
			_, err := tx.LockedRunningCount(ctx, 7)
			close(second)
			return err
		})
	}()
	// Wait until the second transaction is queued behind the first.
	for !holder.blocking(t) {
		select {
		case <-second:
			t.Fatal("a second transaction took the user's slot lock while the first held it")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// A lock on another user is not held off.
	if err := d.WriteTx(ctx, func(tx spec.Tx) error {
		_, err := tx.LockedRunningCount(ctx, 8)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	holder.release()
	<-second
}

// slotHolder is a write transaction holding a user's slot lock, standing
// for another process's promotion.
type slotHolder struct {
	d       *pg.DB
	backend int32      // its PostgreSQL backend
	release func()     // lets it go on and commit; idempotent
	done    chan error // its result, once it ended
}

// holdSlotLock takes the user's slot lock in a write transaction of d and
// returns once it holds it; released, the transaction runs then (when not
// nil) and commits. A test that fails releases it before the store closes.
func holdSlotLock(t *testing.T, d *pg.DB, userID int64, then func(tx spec.Tx) error) *slotHolder {
	t.Helper()
	ctx := context.Background()
	h := &slotHolder{d: d, done: make(chan error, 1)}
	locked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h.release = func() { once.Do(func() { close(release) }) }
	t.Cleanup(h.release) // before the store's Close, registered earlier
	go func() {
		h.done <- d.WriteTx(ctx, func(tx spec.Tx) error {
			if _, err := tx.LockedRunningCount(ctx, userID); err != nil {
				return err
			}
			if err := tx.(*pg.Tx).PG.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&h.backend); err != nil {
				return err
			}
			locked <- struct{}{}
			<-release
			if then != nil {
				return then(tx)
			}
			return nil
		})
	}()
	select {
	case <-locked:
	case err := <-h.done:
		t.Fatalf("hold the slot lock: %v", err)
	}
	return h
}

// blocking reports whether a transaction of the holder's database waits
// for the holder (not any lock wait in the cluster, which another
// package's test may cause).
func (h *slotHolder) blocking(t *testing.T) bool {
	t.Helper()
	var waiting bool
	if err := h.d.Pool().QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity a
		WHERE a.datname = current_database() AND $1::int = ANY (pg_blocking_pids(a.pid)))`, h.backend).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	return waiting
}

// TestSlotReadsSeeWhatCommittedWhileTheyWaited checks the reads a
// promotion makes under the user's slot lock, sent in the lock's round
// trip: each waits for the lock's holder, and then sees what it committed
// (a run it started), as a read sent after the lock would.
func TestSlotReadsSeeWhatCommittedWhileTheyWaited(t *testing.T) {
	d := open(t, pgtest.NewDatabase(t), nil)
	ctx := context.Background()
	u := userWithRuns(t, d, "slots@example.com", "started", "queued")
	for _, read := range []struct {
		name string
		do   func(tx spec.Tx) (string, error)
		want string
	}{
		{"running count", func(tx spec.Tx) (string, error) {
			n, err := tx.LockedRunningCount(ctx, u.ID)
			return fmt.Sprint(n), err
		}, "1"},
		{"startable runs", func(tx spec.Tx) (string, error) {
			// One slot, which the holder took: none, although a stale
			// count would leave it free for "queued".
			runs, err := tx.LockedStartable(ctx, u.ID, 1)
			var ids []string
			for _, r := range runs {
				ids = append(ids, r.ID)
			}
			return fmt.Sprint(ids), err
		}, "[]"},
	} {
		// The holder moves "started" to running under the lock; the read
		// must wait for its commit and count it.
		setStatus := func(status string) func(tx spec.Tx) error {
			return func(tx spec.Tx) error {
				run, err := tx.FindRun(ctx, "started")
				if err != nil {
					return err
				}
				run.Status = status
				return tx.UpdateRun(ctx, run)
			}
		}
		if err := d.WriteTx(ctx, setStatus(spec.StatusQueued)); err != nil {
			t.Fatal(err)
		}
		holder := holdSlotLock(t, d, u.ID, setStatus(spec.StatusRunning))
		got := make(chan string, 1)
		go func() {
			var out string
			err := d.WriteTx(ctx, func(tx spec.Tx) (err error) {
				out, err = read.do(tx)
				return err
			})
			if err != nil {
				out = err.Error()
			}
			got <- out
		}()
		// The read is queued on the holder's lock before the holder writes.
		for !holder.blocking(t) {
			select {
			case out := <-got:
				t.Fatalf("%s: read %s while another transaction held the user's slot lock", read.name, out)
			case <-time.After(5 * time.Millisecond):
			}
		}
		holder.release()
		if err := <-holder.done; err != nil {
			t.Fatal(err)
		}
		if out := <-got; out != read.want {
			t.Errorf("%s after the holder committed = %s, want %s", read.name, out, read.want)
		}
	}
}

// TestStatementsOnTheTransactionSeeItsHeldWrites checks that what River's
// driver (and this package) runs on a write transaction's pgx.Tx goes out
// after the writes the store held back: each way of sending a statement
// sees the run's update made just before it.
func TestStatementsOnTheTransactionSeeItsHeldWrites(t *testing.T) {
	d := open(t, pgtest.NewDatabase(t), nil)
	ctx := context.Background()
	userWithRuns(t, d, "held@example.com", "r")
	const q = `SELECT objective FROM runs WHERE id = 'r'`
	for name, read := range map[string]func(tx pgx.Tx) (string, error){
		"QueryRow": func(tx pgx.Tx) (s string, err error) { return s, tx.QueryRow(ctx, q).Scan(&s) },
		"Query": func(tx pgx.Tx) (string, error) {
			rows, err := tx.Query(ctx, q)
			if err != nil {
				return "", err
			}
			s, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
			return s, err
		},
		"Exec": func(tx pgx.Tx) (string, error) {
			tag, err := tx.Exec(ctx, `UPDATE runs SET mode = mode WHERE id = 'r' AND objective = 'held Exec'`)
			return fmt.Sprint(tag.RowsAffected(), " row"), err
		},
		"SendBatch": func(tx pgx.Tx) (s string, err error) {
			b := &pgx.Batch{}
			b.Queue(q)
			br := tx.SendBatch(ctx, b)
			defer br.Close()
			return s, br.QueryRow().Scan(&s)
		},
	} {
		var got string
		err := d.WriteTx(ctx, func(stx spec.Tx) error {
			run, err := stx.FindRun(ctx, "r")
			if err != nil {
				return err
			}
			run.Objective = "held " + name
			if err := stx.UpdateRun(ctx, run); err != nil {
				return err
			}
			got, err = read(stx.(*pg.Tx).PG)
			return err
		})
		want := "held " + name
		if name == "Exec" {
			want = "1 row"
		}
		if err != nil || got != want {
			t.Errorf("%s after a held update: %q, %v; want %q", name, got, err, want)
		}
	}
}

// TestHeartbeatsNameLiveProcesses checks that a process is live while its
// heartbeat is recent, and not after.
func TestHeartbeatsNameLiveProcesses(t *testing.T) {
	d := open(t, pgtest.NewDatabase(t), nil)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	if err := d.Heartbeat(ctx, "a", now); err != nil {
		t.Fatal(err)
	}
	if err := d.Heartbeat(ctx, "b", now.Add(-10*time.Second)); err != nil {
		t.Fatal(err)
	}
	live, err := d.LiveProcesses(ctx, now.Add(-3*time.Second))
	if err != nil || !live["a"] || live["b"] || len(live) != 1 {
		t.Fatalf("live = %v (%v), want only a", live, err)
	}
	if err := d.Heartbeat(ctx, "b", now); err != nil {
		t.Fatal(err)
	}
	if live, _ := d.LiveProcesses(ctx, now.Add(-3*time.Second)); !live["b"] {
		t.Fatalf("b heartbeat again but is not live: %v", live)
	}
}

// TestFeedSkipsNoEventCommittedOutOfAppendOrder has two transactions of one
// user, in two processes, append an event each, the first before the
// second, and commit in the reverse order, with a feed reader polling after
// each commit and a listener on each store. The reader, following ids as
// the user feed does, gets both events once; the listeners get them in id
// order, so a live stream that skips ids it has passed skips nothing.
func TestFeedSkipsNoEventCommittedOutOfAppendOrder(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	var mu sync.Mutex
	live := map[string][]int64{}
	got := make(chan struct{}, 16)
	sink := func(name string) func([]*spec.Event) {
		return func(evs []*spec.Event) {
			mu.Lock()
			for _, e := range evs {
				live[name] = append(live[name], e.ID)
			}
			mu.Unlock()
			for range evs {
				got <- struct{}{}
			}
		}
	}
	a, b := open(t, url, sink("a")), open(t, url, sink("b"))
	u, err := a.CreateUser(ctx, "a@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, a, u.ID, "r1", "r2")
	// The first transaction appends and then waits, uncommitted.
	appended, commit, firstDone := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		firstDone <- a.WriteTx(ctx, func(tx spec.Tx) error {
			_, err := tx.AppendEvent(ctx, "r1", spec.EventToolCall, nil)
			if err != nil {
				close(appended)
				return err
			}
			appended <- struct{}{}
			<-commit
			return nil
		})
	}()
	released := false
	defer func() { // a failure below must not leave the first transaction open
		if !released {
			close(commit)
			<-firstDone
		}
	}()
	if _, ok := <-appended; !ok {
		released = true
		t.Fatal(<-firstDone)
	}
	// The second appends later and commits first.
	if err := b.WriteTx(ctx, func(tx spec.Tx) error {
		_, err := tx.AppendEvent(ctx, "r2", spec.EventToolCall, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var last int64
	var feed []string
	poll := func() {
		evs, err := b.ListUserEvents(ctx, u.ID, last, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			feed = append(feed, e.RunID)
			last = e.ID
		}
	}
	poll()
	if len(feed) != 1 || feed[0] != "r2" {
		t.Fatalf("feed after the second commit: %v, want [r2]", feed)
	}
	released = true
	close(commit)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	poll()
	if len(feed) != 2 || feed[1] != "r1" {
		t.Fatalf("feed after both commits: %v, want [r2 r1]: the event committed last was skipped", feed)
	}
	for i := range 4 { // two events on each of two listeners
		select {
		case <-got:
		case <-time.After(30 * time.Second): // a guard
			t.Fatalf("the listeners handed on %d of 4 events", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for name, ids := range live {
		if len(ids) != 2 || ids[0] >= ids[1] {
			t.Errorf("listener %s got ids %v: not in increasing order, a live stream would skip one", name, ids)
		}
	}
}

// TestAnnouncedEventsCarryTheirFinalIDs appends a small event and one too
// large for a notification: the listener gets both, the large one read
// from the table up to the announced horizon, with the ids the appends
// returned and the store lists.
func TestAnnouncedEventsCarryTheirFinalIDs(t *testing.T) {
	ctx := context.Background()
	got := make(chan *spec.Event, 4)
	d := open(t, pgtest.NewDatabase(t), func(evs []*spec.Event) {
		for _, e := range evs {
			got <- e
		}
	})
	u := userWithRuns(t, d, "a@example.com", "r")
	big := strings.Repeat("x", 10_000)
	var appended []*spec.Event
	for _, data := range []any{map[string]int{"n": 1}, map[string]string{"big": big}} {
		e, err := d.AppendEvent(ctx, "r", spec.EventToolCall, data)
		if err != nil {
			t.Fatal(err)
		}
		appended = append(appended, e)
	}
	listed, err := d.ListUserEvents(ctx, u.ID, 0, 10)
	if err != nil || len(listed) != 2 {
		t.Fatalf("listed %d events (%v)", len(listed), err)
	}
	for i, want := range appended {
		e := <-got
		if e.ID != want.ID || listed[i].ID != want.ID || e.Seq != want.Seq || string(e.Data) != string(listed[i].Data) {
			t.Fatalf("event %d: announced id %d seq %d, appended id %d, listed id %d", i, e.ID, e.Seq, want.ID, listed[i].ID)
		}
	}
	if !strings.Contains(string(listed[1].Data), big) {
		t.Fatal("the large event's data did not survive")
	}
}

// TestATransactionOfManyEventsIsAnnouncedWhole: a transaction of more events
// than one notification can name is announced in chunks, so the listener
// still gets every event, in id order; before, the notification was too
// large and the whole transaction failed.
func TestATransactionOfManyEventsIsAnnouncedWhole(t *testing.T) {
	ctx := context.Background()
	const n = 1500
	got := make(chan *spec.Event, n)
	d := open(t, pgtest.NewDatabase(t), func(evs []*spec.Event) {
		for _, e := range evs {
			got <- e
		}
	})
	u, err := d.CreateUser(ctx, "many@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	run := testRun("r", u.ID)
	var appended []*spec.Event
	err = d.WriteTx(ctx, func(tx spec.Tx) error {
		if err := tx.InsertRun(ctx, run); err != nil {
			return err
		}
		for i := range n {
			e, err := tx.AppendEvent(ctx, "r", spec.EventToolCall, map[string]int{"i": i})
			if err != nil {
				return err
			}
			appended = append(appended, e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for i, want := range appended {
		select {
		case e := <-got:
			if e.ID != want.ID || e.Seq != int64(i+1) {
				t.Fatalf("announced event %d: id %d seq %d, want id %d seq %d", i, e.ID, e.Seq, want.ID, i+1)
			}
		case <-timeout:
			t.Fatalf("%d of %d events announced", i, n)
		}
	}
}

// TestTheListenerCatchesUpAfterALostConnection: events committed while a
// store's listening connection is cut off from the database reach its
// OnEvents once the connection is back, read from the database: no later
// event is needed to reveal them (a run's last event has none after it).
func TestTheListenerCatchesUpAfterALostConnection(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	writer := open(t, url, nil)
	proxy, via := pgtest.NewProxy(t, url)
	got := make(chan *spec.Event, 100)
	lost := make(chan struct{}, 10)
	d, err := pg.Open(ctx, pg.Options{URL: via, OnEvents: func(evs []*spec.Event) {
		for _, e := range evs {
			got <- e
		}
	}, OnListenError: func(error) { lost <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	u, err := writer.CreateUser(ctx, "a@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	insertRuns(t, writer, u.ID, "r")
	proxy.Cut()
	<-lost // the listener knows its connection is gone
	for i := range 3 {
		if _, err := writer.AppendEvent(ctx, "r", spec.EventToolCall, map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	proxy.Mend()
	for want := int64(1); want <= 3; want++ {
		select {
		case e := <-got:
			if e.RunID != "r" || e.Seq != want {
				t.Fatalf("event %d: run %s seq %d", want, e.RunID, e.Seq)
			}
		case <-time.After(time.Minute): // a guard, not a measurement
			t.Fatalf("event %d never arrived after the connection came back", want)
		}
	}
}

// TestASlotCheckedAtCommitCountsTheRunsItsTransactionStarted: FreeSlot
// reads, without the lock, whether the user has a slot free and nothing
// queued but the run named; CheckSlotAtCommit lets the commit through while
// the runs running, the transaction's own among them, fit in max and none
// is queued, and fails it with spec.ErrNoFreeSlot otherwise, leaving
// nothing of it.
func TestASlotCheckedAtCommitCountsTheRunsItsTransactionStarted(t *testing.T) {
	d := open(t, pgtest.NewDatabase(t), nil)
	ctx := context.Background()
	u := userWithRuns(t, d, "slots@example.com", "mine")
	// start sets the run running in a transaction that checks the slots at
	// its commit, after asking whether one is free.
	start := func(id string, max int) (free bool, err error) {
		err = d.WriteTx(ctx, func(tx spec.Tx) error {
			sc := tx.(spec.SlotChecker)
			var err error
			if free, err = sc.FreeSlot(ctx, u.ID, max, id); err != nil {
				return err
			}
			r, err := tx.FindRun(ctx, id)
			if err != nil {
				return err
			}
			r.Status = spec.StatusRunning
			if err := tx.UpdateRun(ctx, r); err != nil {
				return err
			}
			return sc.CheckSlotAtCommit(ctx, u.ID, max)
		})
		return free, err
	}
	status := func(id string) string {
		r, err := d.FindRun(ctx, u.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	// One slot, none taken: its own run (queued until now) is no obstacle.
	if free, err := start("mine", 1); err != nil || !free {
		t.Fatalf("the only run in one free slot: free %v, commit %v; want free and committed", free, err)
	}
	// The slot is taken: a second run does not fit, and stays queued.
	insertRuns(t, d, u.ID, "second")
	if free, err := start("second", 1); !errors.Is(err, spec.ErrNoFreeSlot) || free {
		t.Fatalf("a run beyond the one slot: free %v, commit %v; want not free and %v", free, err, spec.ErrNoFreeSlot)
	}
	if s := status("second"); s != spec.StatusQueued {
		t.Fatalf("the run whose check failed is %s, want queued", s)
	}
	// With two slots it fits, unless another run is queued ahead.
	insertRuns(t, d, u.ID, "third")
	if free, err := start("second", 2); !errors.Is(err, spec.ErrNoFreeSlot) || free {
		t.Fatalf("a run while another is queued: free %v, commit %v; want not free and %v", free, err, spec.ErrNoFreeSlot)
	}
	if err := d.WriteTx(ctx, func(tx spec.Tx) error {
		r, err := tx.FindRun(ctx, "third")
		if err != nil {
			return err
		}
		r.Status = spec.StatusCanceled
		return tx.UpdateRun(ctx, r)
	}); err != nil {
		t.Fatal(err)
	}
	if free, err := start("second", 2); err != nil || !free {
		t.Fatalf("a run in the second of two slots: free %v, commit %v; want free and committed", free, err)
	}
	if s := status("second"); s != spec.StatusRunning {
		t.Fatalf("the run whose check passed is %s, want running", s)
	}
}
