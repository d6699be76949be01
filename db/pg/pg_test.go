package pg_test

import (
	"context"
	"sync"
	"testing"
	"time"

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

// TestConformance runs the store conformance suite against PostgreSQL.
func TestConformance(t *testing.T) {
	pgtest.ServerURL(t)
	storetest.Run(t, func(t *testing.T) storetest.Store[*pg.Tx] {
		return open(t, pgtest.NewDatabase(t), nil)
	})
}

// TestConformanceLater runs the suite's later parts against PostgreSQL.
func TestConformanceLater(t *testing.T) {
	pgtest.ServerURL(t)
	storetest.RunLater(t, func(t *testing.T) storetest.LaterStore[*pg.Tx] {
		return open(t, pgtest.NewDatabase(t), nil)
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
	run := &spec.Run{ID: "r", UserID: u.ID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
		Config: []byte(`{}`), Status: spec.StatusQueued}
	if err := a.WriteTx(ctx, func(tx *pg.Tx) error { return tx.InsertRun(ctx, run) }); err != nil {
		t.Fatal(err)
	}
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

// TestLockUserSlotsSerialisesPromotions checks that the per-user advisory
// lock makes a second transaction wait until the first commits.
func TestLockUserSlotsSerialisesPromotions(t *testing.T) {
	d := open(t, pgtest.NewDatabase(t), nil)
	ctx := context.Background()
	locked, release := make(chan struct{}), make(chan struct{})
	second := make(chan struct{})
	go func() {
		d.WriteTx(ctx, func(tx *pg.Tx) error {
			if err := tx.LockUserSlots(ctx, 7); err != nil {
				t.Error(err)
			}
			close(locked)
			<-release
			return nil
		})
	}()
	<-locked
	go func() {
		d.WriteTx(ctx, func(tx *pg.Tx) error {
			err := tx.LockUserSlots(ctx, 7)
			close(second)
			return err
		})
	}()
	// Wait until the second transaction is queued on the advisory lock.
	for {
		var waiting int
		if err := d.Pool().QueryRow(ctx, `SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		select {
		case <-second:
			t.Fatal("a second transaction took the user's slot lock while the first held it")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// A lock on another user is not held off.
	if err := d.WriteTx(ctx, func(tx *pg.Tx) error { return tx.LockUserSlots(ctx, 8) }); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-second
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
