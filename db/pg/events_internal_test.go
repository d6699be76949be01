package pg

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/pg/pgtest"
	"homework/engine/spec"
)

// openInternal opens a store on url whose listener sends the events it
// hands on to the returned channel.
func openInternal(t *testing.T, url string) (*DB, chan *spec.Event) {
	t.Helper()
	got := make(chan *spec.Event, 100)
	d, err := Open(context.Background(), Options{URL: url, OnEvents: func(evs []*spec.Event) {
		for _, e := range evs {
			got <- e
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, got
}

// userWithRuns creates a user and queued runs with the given ids.
func userWithRuns(t *testing.T, d *DB, ids ...string) *spec.User {
	t.Helper()
	ctx := context.Background()
	u, err := d.CreateUser(ctx, "feed@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		run := &spec.Run{ID: id, UserID: u.ID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
			Config: []byte(`{}`), Status: spec.StatusQueued}
		if err := d.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, run) }); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// drawInFlight begins a transaction on conn that does what writeEvents
// does for one event of runID, up to its commit: the event has its id and
// is written, uncommitted. It returns the transaction and the id.
func drawInFlight(t *testing.T, conn *pgx.Conn, runID string) (pgx.Tx, int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, seqSQL, runID, 1); err != nil {
		t.Fatal(err)
	}
	var ids, users, seqs []int64
	if err := tx.QueryRow(ctx, insertSQL, []string{runID}, []string{string(spec.EventToolCall)}, []string{"{}"},
		[]int64{time.Now().UnixMilli()}, int32(feedLock)).Scan(&ids, &users, &seqs, nil); err != nil || len(ids) != 1 {
		t.Fatalf("write the event in flight: %v (%d ids)", err, len(ids))
	}
	return tx, ids[0]
}

// withOneInFlight opens a store on a new database with a user and runs of
// the given ids, and begins, on a connection of its own, a transaction in
// flight with an event of the first run (drawInFlight), which is rolled
// back at the end of the test unless committed. It returns the store, the
// events its listener hands on, the user, the transaction and its event's
// id.
func withOneInFlight(t *testing.T, ids ...string) (*DB, chan *spec.Event, *spec.User, pgx.Tx, int64) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	d, got := openInternal(t, url)
	u := userWithRuns(t, d, ids...)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	inFlight, first := drawInFlight(t, conn, ids[0])
	t.Cleanup(func() { inFlight.Rollback(ctx) })
	return d, got, u, inFlight, first
}

// commitInFlight commits the transaction in flight with the event first,
// after checking that the listener handed on nothing meanwhile.
func commitInFlight(t *testing.T, got chan *spec.Event, inFlight pgx.Tx, first int64) {
	t.Helper()
	select {
	case e := <-got:
		t.Fatalf("the listener handed on event %d while %d was in flight", e.ID, first)
	default:
	}
	if err := inFlight.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// handedOn fails the test unless the listener hands on the events with
// ids want, in that order.
func handedOn(t *testing.T, got chan *spec.Event, want ...int64) {
	t.Helper()
	for _, id := range want {
		select {
		case e := <-got:
			if e.ID != id {
				t.Fatalf("the listener handed on %d, want %d", e.ID, id)
			}
		case <-time.After(30 * time.Second): // a guard
			t.Fatalf("the listener never handed on %d", id)
		}
	}
}

// TestTheFeedWaitsForAnIDStillInFlight: a transaction (another process's,
// here by hand) has drawn its event's id and not yet committed when a
// later transaction commits an event with a larger id. A feed reader
// waits for the first to end instead of passing its id, and then gets
// both in id order (and a read transaction, as a page's, finds the newest
// only then, without waiting); the listener hands on neither before the first
// commits, and then both in id order. Before the horizon, a reader that
// read the second event first never saw the first.
func TestTheFeedWaitsForAnIDStillInFlight(t *testing.T) {
	// No unpoked look: its lock request would queue behind the
	// transaction in flight, and the append below behind it.
	defer func(d time.Duration) { announceEvery = d }(announceEvery)
	announceEvery = time.Hour
	ctx := context.Background()
	d, got, u, inFlight, first := withOneInFlight(t, "r1", "r2")
	actx, cancel := context.WithTimeout(ctx, 30*time.Second) // a guard
	defer cancel()
	later, err := d.AppendEvent(actx, "r2", spec.EventToolCall, nil)
	if err != nil {
		t.Fatal(err)
	}
	if later.ID <= first {
		t.Fatalf("the later event has id %d, not after %d", later.ID, first)
	}
	// A read transaction, as a page's, starts its feed before the id in
	// flight: at the last horizon known, without waiting.
	newest := func() int64 {
		var id int64
		if err := d.ReadTx(ctx, func(r spec.ReadStore) (err error) {
			id, err = r.LastUserEventID(ctx, u.ID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	if id := newest(); id >= first {
		t.Fatalf("a read transaction found the newest event %d, past the id %d in flight", id, first)
	}
	listed := make(chan []*spec.Event, 1)
	go func() {
		evs, err := d.ListUserEvents(ctx, u.ID, 0, 10)
		if err != nil {
			t.Error(err)
		}
		listed <- evs
	}()
	// The reader waits on the feed lock, behind the transaction in
	// flight (the announcer the append poked waits too once its tries
	// are over; it is not counted).
	deadline := time.Now().Add(30 * time.Second) // a guard, not a measurement
	for {
		var waiting int
		if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = 0 AND l.objsubid = 2 AND NOT l.granted
			AND a.query LIKE 'WITH l AS MATERIALIZED%' AND a.query NOT LIKE '%homework.horizon%'`, int64(feedLock)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case evs := <-listed:
			t.Fatalf("the feed was read past an id in flight: %d events", len(evs))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no reader waits for the id in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	commitInFlight(t, got, inFlight, first)
	evs := <-listed
	if len(evs) != 2 || evs[0].ID != first || evs[1].ID != later.ID {
		t.Fatalf("feed: %v, want ids %d then %d", ids(evs), first, later.ID)
	}
	handedOn(t, got, first, later.ID)
	// The listener heard the horizon before handing the events on.
	if id := newest(); id != later.ID {
		t.Fatalf("the newest event in a read transaction: %d, want %d", id, later.ID)
	}
}

// TestAnAnnouncerTryingTheFeedLockDoesNotHoldUpWriters: a writer is in
// its commit (another process's transaction, here by hand, has drawn its
// id and holds the feed lock shared) when this process commits an event
// and cannot announce it. Its announcer tries the lock again and again
// without queueing for it (for announceTrying, here as long as the test),
// so a third writer does not wait behind it: a request for the lock
// exclusive, waiting for the first writer, made every writer that came
// meanwhile wait too. Once the first commits, the listener hands on all
// three events in id order.
func TestAnAnnouncerTryingTheFeedLockDoesNotHoldUpWriters(t *testing.T) {
	// Restored after the store (and its announcer, which reads them)
	// closed: cleanups run last registered first.
	every, trying := announceEvery, announceTrying
	t.Cleanup(func() { announceEvery, announceTrying = every, trying })
	announceEvery, announceTrying = time.Hour, time.Hour
	ctx := context.Background()
	d, got, _, inFlight, first := withOneInFlight(t, "r1", "r2", "r3")
	actx, cancel := context.WithTimeout(ctx, 30*time.Second) // a guard
	defer cancel()
	second, err := d.AppendEvent(actx, "r2", spec.EventToolCall, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The announcer the append poked has tried, more than once, and
	// nothing waits for the feed lock.
	for tries := d.announcer.tries.Load(); d.announcer.tries.Load() < tries+2; {
		if actx.Err() != nil {
			t.Fatal("the announcer did not try the feed lock again: it waits for it, or never tried")
		}
		time.Sleep(time.Millisecond)
	}
	var waiting int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1
		AND objid = 0 AND objsubid = 2 AND NOT granted`, int64(feedLock)).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != 0 {
		t.Fatalf("%d sessions wait for the feed lock while a writer commits", waiting)
	}
	third, err := d.AppendEvent(actx, "r3", spec.EventToolCall, nil)
	if err != nil {
		t.Fatalf("a writer waited behind the announcer: %v", err)
	}
	commitInFlight(t, got, inFlight, first)
	handedOn(t, got, first, second.ID, third.ID)
}

func ids(evs []*spec.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// TestEventsNoProcessAnnouncedAreHandedOn: a process that commits events
// and dies before it announces them (here a transaction by hand, which
// announces nothing) leaves them to the other processes, whose announcers
// look at the horizon unpoked too.
func TestEventsNoProcessAnnouncedAreHandedOn(t *testing.T) {
	defer func(d time.Duration) { announceEvery = d }(announceEvery)
	announceEvery = 50 * time.Millisecond
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	d, got := openInternal(t, url)
	userWithRuns(t, d, "r")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, id := drawInFlight(t, conn, "r")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.ID != id || e.Seq != 1 {
			t.Fatalf("handed on id %d seq %d, want id %d seq 1", e.ID, e.Seq, id)
		}
	case <-time.After(30 * time.Second): // a guard
		t.Fatal("an event no process announced was never handed on")
	}
}

// TestTheEventSequenceHandsOutOneIDAtATime: the horizon reads the last id
// the sequence handed out as the largest drawn, which holds only while no
// session caches ids ahead (CACHE 1).
func TestTheEventSequenceHandsOutOneIDAtATime(t *testing.T) {
	d, _ := openInternal(t, pgtest.NewDatabase(t))
	var cache int64
	if err := d.pool.QueryRow(context.Background(), `SELECT seqcache FROM pg_sequence
		WHERE seqrelid = pg_get_serial_sequence('events', 'id')::regclass`).Scan(&cache); err != nil {
		t.Fatal(err)
	}
	if cache != 1 {
		t.Fatalf("the events' id sequence caches %d ids per session: the feed horizon would pass ids not yet drawn", cache)
	}
}

// TestAnAppendOfDataThatIsNotJSONFails: event data that is not JSON fails
// its write, as before announcements left the writing transaction; had it
// been written, every announcement reading it would fail.
func TestAnAppendOfDataThatIsNotJSONFails(t *testing.T) {
	d, _ := openInternal(t, pgtest.NewDatabase(t))
	userWithRuns(t, d, "r")
	ctx := context.Background()
	if _, err := d.AppendEvent(ctx, "r", spec.EventToolCall, json.RawMessage("not json")); err == nil {
		t.Fatal("an append of data that is not JSON was written")
	}
	if e, err := d.AppendEvent(ctx, "r", spec.EventToolCall, json.RawMessage(`{"a": 1}`)); err != nil || e.Seq != 1 {
		t.Fatalf("the next append: %v, %v", e, err)
	}
}
