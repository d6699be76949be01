package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/sqlstore"
	"homework/engine/spec"
)

// NOTIFY channels: the feed horizon's advances (see feedHorizon), and runs
// whose iteration must stop.
const (
	eventsChannel    = "homework_events"
	interruptChannel = "homework_interrupts"
)

// seqSQL takes n seqs of the run at once, for a committing transaction's
// events (writeEvents). The UPDATE row-locks the run until the transaction
// ends, so appends to one run from any process are serialised and
// gap-free.
const seqSQL = `UPDATE runs SET last_seq = last_seq + $2 WHERE id = $1`

// AppendEvent appends an event of typ with data (marshalled to JSON) to the
// run's log inside tx. Nothing is sent yet: the event takes its seq, id and
// user and is written when tx commits (writeEvents); every process's
// listener hands it on once the feed horizon passes it. Until then its Seq,
// ID and UserID are zero.
func (tx *Tx) AppendEvent(ctx context.Context, runID string, typ spec.EventType, data any) (*spec.Event, error) {
	b, err := sqlstore.MarshalEventData(data)
	if err != nil {
		return nil, err
	}
	e := &spec.Event{RunID: runID, Type: typ, Data: b, CreatedAt: tx.Now()}
	tx.events = append(tx.events, e)
	return e, nil
}

// Interrupt tells every process, through NOTIFY, to stop the run's
// in-flight iteration; the one working it does (Options.OnInterrupt). It
// is the engine's Interrupter on PostgreSQL; cause is implied (the run was
// canceled).
func (d *DB) Interrupt(ctx context.Context, runID string, cause error) error {
	_, err := d.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, interruptChannel, runID)
	return err
}

// AppendEvent appends one event in its own transaction.
func (d *DB) AppendEvent(ctx context.Context, runID string, typ spec.EventType, data any) (*spec.Event, error) {
	var e *spec.Event
	err := d.write(ctx, func(tx *Tx) (err error) {
		e, err = tx.AppendEvent(ctx, runID, typ, data)
		return err
	})
	return e, err
}

// insertSQL writes a transaction's events, given column by column in
// append order in $1..$4, with fresh ids from the sequence in that same
// order. An event's seq is its place among the transaction's events of its
// run, counted back from the run's last_seq, which the transaction has
// just advanced by their number (seqSQL); its user is the run's. An event
// of a run that is not there fails the statement (its user and seq are
// null, which the table refuses), and so does data that is not JSON (the
// cast, which keeps the text as it is), which announcements could not
// carry. It returns the new ids in append order
// (id order too, as they are drawn in that order), with their users and
// seqs, and keeps the first id in the session's homework.first_event, for
// the announcement that follows in the same round trip (tryAnnounceSQL).
// The ids are drawn in a materialised CTE and matched by rank, so their
// order does not depend on how the planner evaluates nextval; they are
// drawn holding the feed lock shared ($5, feedLock), taken in this
// statement (a row of l precedes every draw) so that it is held only
// once the statement and its arguments have reached the server.
const insertSQL = `WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared($5::int4, 0)),
	n AS MATERIALIZED (SELECT nextval(pg_get_serial_sequence('events', 'id')) AS new
		FROM l, generate_series(1, cardinality($1::text[]))),
	s AS (SELECT new, row_number() OVER (ORDER BY new) AS ord FROM n),
	a AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
		WITH ORDINALITY AS a(run_id, type, data, created_at, ord)),
	u AS (SELECT a.*, runs.user_id, runs.last_seq - count(*) OVER (PARTITION BY a.run_id)
			+ row_number() OVER (PARTITION BY a.run_id ORDER BY a.ord) AS seq
		FROM a LEFT JOIN runs ON runs.id = a.run_id),
	r AS (INSERT INTO events (id, run_id, user_id, seq, type, data, created_at)
		SELECT s.new, u.run_id, u.user_id, u.seq, u.type, u.data::json::text, u.created_at FROM u JOIN s USING (ord)
		RETURNING id, user_id, seq)
	SELECT array_agg(id ORDER BY id), array_agg(user_id ORDER BY id), array_agg(seq ORDER BY id),
		set_config('homework.first_event', min(id)::text, false) FROM r`

// writeEvents takes the seqs of the transaction's events, writes them and
// commits, in one round trip, when the transaction has events (committed is
// then true).
//
// First each run's counter is advanced by its events (seqSQL, in run
// order), which row-locks the run until the transaction ends. Then the
// insert takes the feed lock shared (feedLock), and only then draws its
// events' ids, so that the feed horizon (feedHorizon) can wait for
// every id drawn so far to commit or roll back; writers do not wait on one
// another for it. It runs nothing else before COMMIT, so the lock is short
// and cannot close a cycle with the row locks others wait on (the events'
// runs are locked by then; the insert's key checks wait on nothing else).
//
// Nothing is announced in the transaction: a NOTIFY there would make its
// commit wait for every other announcing transaction's, WAL flush
// included, as PostgreSQL queues notifications in commit order under one
// cluster-wide lock. Right after COMMIT, in the same round trip, the
// horizon is announced if no other writer is in its commit (tryHorizonSQL,
// tryAnnounceSQL); else the process's announcer announces it once the
// writers in their commit are done (announcer.poke).
//
// Each event is written once, here: appending sent nothing. Any error in
// the round trip skips what follows it, COMMIT included.
func (tx *Tx) writeEvents(ctx context.Context) (committed bool, err error) {
	if len(tx.events) == 0 {
		return false, nil
	}
	n := len(tx.events)
	counts := map[string]int64{}
	for _, e := range tx.events {
		counts[e.RunID]++
	}
	runs, types, data, created := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, e := range tx.events {
		runs[i], types[i], data[i], created[i] = e.RunID, string(e.Type), string(e.Data), e.CreatedAt.UnixMilli()
	}
	// After the writes the transaction held back (txConn), in the same
	// round trip.
	br, err := tx.conn.send(ctx, func(b *pgx.Batch) {
		for _, id := range slices.Sorted(maps.Keys(counts)) {
			b.Queue(seqSQL, id, counts[id])
		}
		// PostgreSQL plans insertSQL afresh for every call by default
		// (its estimate for a plan made for any array is worse than for
		// the arrays it is given), which cost more than running it; the
		// plan it makes once does as well.
		b.Queue(`SET LOCAL plan_cache_mode = force_generic_plan`)
		b.Queue(insertSQL, runs, types, data, created, int32(feedLock))
		b.Queue(`COMMIT`)
		queueAnnouncement(b, tryHorizonSQL, tryAnnounceSQL, eventsChannel, maxPayload)
	})
	if err != nil {
		return false, err
	}
	defer br.Close()
	for range counts {
		tag, err := br.Exec()
		if err != nil {
			return false, fmt.Errorf("take event seqs: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return false, spec.Errorf(spec.ENOTFOUND, "Run not found.")
		}
	}
	if _, err := br.Exec(); err != nil {
		return false, fmt.Errorf("plan event writes: %w", err)
	}
	var ids, users, seqs []int64
	var first string
	if err := br.QueryRow().Scan(&ids, &users, &seqs, &first); err != nil {
		return false, fmt.Errorf("write events: %w", err)
	}
	if len(ids) != n || len(users) != n || len(seqs) != n {
		// Not with commit: insertSQL fails rather than write fewer.
		return false, fmt.Errorf("write events: %d of %d events written", len(ids), n)
	}
	if _, err := br.Exec(); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	for i, e := range tx.events {
		e.ID, e.UserID, e.Seq = ids[i], users[i], seqs[i]
	}
	// Committed: what follows cannot fail the transaction. When the
	// announcement was not made (other writers were in their commit, or
	// it failed), the announcer makes it.
	_, h, err := readAnnouncement(br)
	// The notification goes out when its transaction commits, which only
	// Close reports.
	if br.Close() == nil && err == nil {
		tx.db.announcer.saw(h)
	}
	tx.db.announcer.poke(ids[n-1])
	return true, nil
}

// feedLock is the first key of the advisory lock that orders the user
// feed: every transaction that writes events holds it shared while it
// draws their ids and until its commit is visible (writeEvents), and
// feedHorizon takes it exclusively for a moment.
const feedLock = 0x46656564 // "Feed"

// horizonSQL waits for every transaction that has drawn event ids to end
// (it takes the feed lock exclusively, which waits for the shared holders,
// and is released when the statement ends) and then reads the last id the
// sequence handed out. The materialised CTE takes the lock before the
// sequence is read.
const horizonSQL = `WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock($1::int4, 0))
	SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence('events', 'id')::regclass), 0) FROM l`

// feedHorizon returns the feed horizon: an event id such that every event
// with an id up to it that will ever commit has committed and is visible.
// The user feed follows global event ids, and ids are drawn from a
// sequence as transactions commit, in any order across processes; so a
// reader that read past an id still in flight would never see it. Readers
// of the feed read no further than the horizon (ListUserEvents, the
// listener), and so skip nothing.
//
// Transactions draw ids only while holding the feed lock shared, and the
// horizon takes it exclusively before reading the sequence: by then every
// transaction that drew an id up to the value read has ended (PostgreSQL
// releases locks after a commit is visible), and any later one draws a
// larger id. Writers share the lock, so they do not wait on one another;
// a horizon waits for the writers already in their commit, and the
// writers that come meanwhile wait for it, a moment. The sequence hands
// out one id at a time (BIGSERIAL's CACHE 1), so the last value it handed
// out is the largest id drawn.
func (d *DB) feedHorizon(ctx context.Context) (int64, error) {
	var h int64
	if err := d.pool.QueryRow(ctx, horizonSQL, int32(feedLock)).Scan(&h); err != nil {
		return 0, fmt.Errorf("pg: feed horizon: %w", err)
	}
	return h, nil
}

// ListUserEvents returns up to limit of the user's events with ids after
// afterID and up to the feed horizon, in id order: following the feed by
// id skips nothing.
func (d *DB) ListUserEvents(ctx context.Context, userID, afterID int64, limit int) ([]*spec.Event, error) {
	h, err := d.feedHorizon(ctx)
	if err != nil {
		return nil, err
	}
	return listUserEvents(ctx, pgConn{d.pool}, userID, afterID, h, limit)
}

// LastUserEventID returns the id of the newest event of the user's runs up
// to the feed horizon, or 0: a feed started after it misses no event still
// in flight.
func (d *DB) LastUserEventID(ctx context.Context, userID int64) (int64, error) {
	h, err := d.feedHorizon(ctx)
	if err != nil {
		return 0, err
	}
	return lastUserEventID(ctx, pgConn{d.pool}, userID, h)
}

// listUserEvents reads the user's events after afterID up to the horizon h
// through c.
func listUserEvents(ctx context.Context, c pgConn, userID, afterID, h int64, limit int) ([]*spec.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	return sqlstore.ScanEvents(c.Query(ctx, `SELECT `+sqlstore.EventColumns+` FROM events
		WHERE user_id = ? AND id > ? AND id <= ? ORDER BY id LIMIT ?`, userID, afterID, h, limit))
}

// lastUserEventID reads the id of the user's newest event up to the
// horizon h through c.
func lastUserEventID(ctx context.Context, c pgConn, userID, h int64) (int64, error) {
	var id int64
	err := c.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM events WHERE user_id = ? AND id <= ?`, userID, h).Scan(&id)
	return id, err
}

// maxPayload keeps a notification under PostgreSQL's 8000-byte limit; an
// announcement whose events do not fit names only the horizon.
const maxPayload = 7000

// announceTail announces the horizon h of the CTE h (with from, f), unless
// it is not past f: a notice with the events in (f, h], or only f and h
// when they do not fit in $2 bytes (or would not, at 20 bytes an event at
// least: their ids are not read then), on channel $1. Its transaction
// commits without waiting for its WAL flush: a notification is lost in a
// crash anyway, and the horizon is announced again.
const announceTail = `,
	e AS (SELECT h, json_build_object('f', f, 'h', h, 'e', CASE WHEN h - f <= $2 / 20 THEN (SELECT COALESCE(json_agg(
			json_build_object('i', id, 'r', run_id, 'u', user_id, 's', seq, 't', type, 'd', data::json, 'c', created_at)
			ORDER BY id), '[]') FROM events WHERE id > f AND id <= h) END)::text AS whole,
			json_build_object('f', f, 'h', h)::text AS short
		FROM h WHERE h > f),
	s AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) FROM e)
	SELECT h, pg_notify($1, CASE WHEN octet_length(whole) <= $2 THEN whole ELSE short END) FROM e, s`

// lastDrawn is the last id the events' sequence handed out.
const lastDrawn = `COALESCE(pg_sequence_last_value(pg_get_serial_sequence('events', 'id')::regclass), 0)`

// An announcement reads the horizon in a transaction of its own, which
// takes the feed lock exclusively ($1, feedLock) and keeps the horizon in
// the session's homework.horizon ("" when the lock was not free), and then,
// in the same round trip, announces it (announceSQL, tryAnnounceSQL). The
// lock is released with that first transaction's COMMIT, before the events
// are read and the notice is built and sent: a writer that comes meanwhile
// waits for the lock only while the horizon is read. What the
// announcement reads is still every event up to the horizon: its
// statement's snapshot is taken after the lock was granted, by when every
// writer that drew an id up to it had ended.
//
//   - lockHorizonSQL waits for the lock;
//   - tryHorizonSQL takes it only if no writer holds it.
const (
	lockHorizonSQL = `WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock($1::int4, 0))
	SELECT set_config('homework.horizon', (SELECT ` + lastDrawn + ` FROM l)::text, false)`
	tryHorizonSQL = `SELECT set_config('homework.horizon',
		CASE WHEN pg_try_advisory_xact_lock($1::int4, 0) THEN (` + lastDrawn + `)::text ELSE '' END, false)`
)

// announceSQL announces the horizon read before it (homework.horizon) from
// $3 on. It returns no row when it announced nothing: no horizon was read,
// or it is not past $3.
const announceSQL = `WITH h AS MATERIALIZED (SELECT current_setting('homework.horizon')::bigint AS h, $3::bigint AS f
		WHERE current_setting('homework.horizon') <> '')` + announceTail

// tryAnnounceSQL announces the horizon read before it (homework.horizon)
// after a writer's commit, from the writer's first event
// (homework.first_event) on. It returns no row when it announced nothing.
const tryAnnounceSQL = `WITH h AS MATERIALIZED (SELECT current_setting('homework.horizon')::bigint AS h,
		current_setting('homework.first_event')::bigint - 1 AS f WHERE current_setting('homework.horizon') <> '')` + announceTail

// queueAnnouncement queues, in b, a transaction that reads the horizon
// with horizon (lockHorizonSQL or tryHorizonSQL), then announce with args.
func queueAnnouncement(b *pgx.Batch, horizon, announce string, args ...any) {
	b.Queue(`BEGIN`)
	b.Queue(horizon, int32(feedLock))
	b.Queue(`COMMIT`)
	b.Queue(announce, args...)
}

// readAnnouncement reads the results queueAnnouncement queued: the horizon
// read ("" when the lock was not free) and the one announced, pgx.ErrNoRows
// when none was.
func readAnnouncement(br pgx.BatchResults) (read string, announced int64, err error) {
	if _, err := br.Exec(); err != nil {
		return "", 0, err
	}
	if err := br.QueryRow().Scan(&read); err != nil {
		return "", 0, err
	}
	if _, err := br.Exec(); err != nil {
		return "", 0, err
	}
	err = br.QueryRow().Scan(&announced, nil)
	return read, announced, err
}

// wireEvent is an event in a notice; unlike spec.Event's JSON it carries
// the user id.
type wireEvent struct {
	ID        int64           `json:"i"`
	RunID     string          `json:"r"`
	UserID    int64           `json:"u"`
	Seq       int64           `json:"s"`
	Type      spec.EventType  `json:"t"`
	Data      json.RawMessage `json:"d"`
	CreatedAt int64           `json:"c"`
}

// horizonNotice is a notification on eventsChannel: the feed horizon has
// reached H, and E, when present, are the events after F up to it.
type horizonNotice struct {
	F int64        `json:"f"`
	H int64        `json:"h"`
	E *[]wireEvent `json:"e"`
}

// announcer tells every process, through NOTIFY, where the feed horizon
// is, after this process commits events (poke) and, in case a process
// committed events and died before it could tell, every announceEvery.
// One announcement covers the commits before it: pokes that come while
// one is made are folded into the next.
type announcer struct {
	d      *DB
	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	// told is the highest horizon known: read when the store opened, or
	// announced, by this process or, as its listener heard, any other. A
	// horizon not beyond it is not announced again, and a read
	// transaction reads the feed up to it (ReadTx).
	told atomic.Int64
	// mine is the largest id of the events this process committed.
	mine atomic.Int64
	// unsent is set when this process committed events that may not have
	// been announced yet.
	unsent atomic.Bool
	// onErr is told a failed announcement (the next poke or tick tries
	// again). It may be nil.
	onErr func(error)
	// tries counts the announcements tried, for tests.
	tries atomic.Int64
}

// announceEvery is how often an announcer looks at the horizon without
// being poked.
var announceEvery = time.Second

func startAnnouncer(d *DB, onErr func(error)) *announcer {
	ctx, cancel := context.WithCancel(context.Background())
	a := &announcer{d: d, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}), onErr: onErr}
	go a.loop(ctx)
	return a
}

// poke asks for an announcement of the events this process committed, up
// to id last; one already asked for covers it.
func (a *announcer) poke(last int64) {
	maxInto(&a.mine, last)
	a.unsent.Store(true)
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// stop ends the announcer, making a last announcement when events this
// process committed may not have been announced yet.
func (a *announcer) stop() {
	a.cancel()
	<-a.done
}

func (a *announcer) loop(ctx context.Context) {
	defer close(a.done)
	tick := time.NewTicker(announceEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if a.unsent.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				a.announce(ctx, a.mine.Load())
				cancel()
			}
			return
		case <-a.kick:
			if a.mine.Load() <= a.told.Load() {
				// Another process announced a horizon past this
				// process's events meanwhile.
				a.unsent.Store(false)
				continue
			}
			a.announce(ctx, a.mine.Load())
		case <-tick.C:
			// Nothing drawn since the last horizon announced: nothing
			// to wait for the lock for.
			var drawn int64
			err := a.d.pool.QueryRow(ctx, `SELECT `+lastDrawn).Scan(&drawn)
			if err == nil && drawn <= a.told.Load() && !a.unsent.Load() {
				continue
			}
			a.announce(ctx, max(drawn, a.mine.Load()))
		}
	}
}

// announce announces the horizon unless it is known already. A failure
// leaves the events it would have covered to the next one.
//
// It first tries the feed lock without waiting, announceTrying long, at
// growing intervals: a writer holds the lock shared from drawing its ids to
// the end of its COMMIT, and a request for it exclusive that waits for them
// makes every writer that comes meanwhile wait behind it too, each holding
// its runs' row locks, so writers of all processes queued behind each
// announcement. A try that finds the lock free announces at once; one that
// does not takes nothing. It stops trying once a horizon at least as far
// as the one it was asked for has been announced (by a writer after its
// commit, or another process), and only after announceTrying waits for
// the lock, so that writers that never leave a moment free cannot keep the
// horizon back. target is the horizon it was asked for: the last id this
// process drew, or the sequence's.
func (a *announcer) announce(ctx context.Context, target int64) {
	a.unsent.Store(false)
	var wait *time.Timer
	end := time.Now().Add(announceTrying)
	for gap := 250 * time.Microsecond; ; gap = min(2*gap, 4*time.Millisecond) {
		h, err := a.announceOnce(ctx, !time.Now().Before(end))
		if errors.Is(err, errFeedBusy) {
			if a.told.Load() >= target {
				return
			}
			if wait == nil {
				wait = time.NewTimer(gap)
				defer wait.Stop()
			} else {
				wait.Reset(gap)
			}
			select {
			case <-wait.C:
				continue
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		switch {
		case err == nil:
			a.saw(h)
		case errors.Is(err, pgx.ErrNoRows): // nothing past what was told
		default:
			a.unsent.Store(true)
			if ctx.Err() == nil && a.onErr != nil {
				a.onErr(fmt.Errorf("pg: announce events: %w", err))
			}
		}
		return
	}
}

// announceTrying is how long an announcement tries the feed lock without
// waiting for it (announce).
var announceTrying = 25 * time.Millisecond

// errFeedBusy says a try for the feed lock found writers in their commit.
var errFeedBusy = errors.New("writers hold the feed lock")

// announceOnce announces the horizon past the one told, taking the feed
// lock exclusively, waiting for it when block is set and else only if it
// is free (errFeedBusy when it is not). It returns the horizon announced,
// or pgx.ErrNoRows when there was none past the one told.
func (a *announcer) announceOnce(ctx context.Context, block bool) (int64, error) {
	b := &pgx.Batch{}
	horizon := tryHorizonSQL
	if block {
		horizon = lockHorizonSQL
	}
	queueAnnouncement(b, horizon, announceSQL, eventsChannel, maxPayload, a.told.Load())
	a.tries.Add(1)
	br := a.d.pool.SendBatch(ctx, b)
	read, h, err := readAnnouncement(br)
	if cerr := br.Close(); err == nil || errors.Is(err, pgx.ErrNoRows) && cerr != nil {
		err = cerr
	}
	if read == "" && errors.Is(err, pgx.ErrNoRows) {
		return 0, errFeedBusy
	}
	return h, err
}

// saw records that horizon h was announced.
func (a *announcer) saw(h int64) { maxInto(&a.told, h) }

// maxInto raises v to x unless it is larger already.
func maxInto(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// listener holds one connection that LISTENs for the feed horizon's
// advances and hands the events up to it to OnEvents, in id order.
type listener struct {
	d           *DB
	publish     func([]*spec.Event)
	onInterrupt func(runID string)
	onErr       func(error)
	cancel      context.CancelFunc
	done        chan struct{}
	// last is the horizon up to which events were handed on: at a
	// notification, and at a reconnection, the events after it up to the
	// horizon are read and handed on.
	last int64
}

func startListener(ctx context.Context, d *DB, opts Options) (*listener, error) {
	conn, err := d.listen(ctx)
	if err != nil {
		return nil, err
	}
	last, err := d.feedHorizon(ctx)
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("pg: listener start: %w", err)
	}
	d.announcer.saw(last)
	lctx, cancel := context.WithCancel(context.Background())
	l := &listener{d: d, publish: opts.OnEvents, onInterrupt: opts.OnInterrupt, onErr: opts.OnListenError,
		cancel: cancel, done: make(chan struct{}), last: last}
	go l.loop(lctx, conn)
	return l, nil
}

func (d *DB) listen(ctx context.Context) (*pgx.Conn, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pg: listener connection: %w", err)
	}
	conn := c.Hijack()
	if _, err := conn.Exec(ctx, `LISTEN `+eventsChannel+`; LISTEN `+interruptChannel); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("pg: listen: %w", err)
	}
	return conn, nil
}

func (l *listener) stop() {
	l.cancel()
	<-l.done
}

func (l *listener) loop(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		if conn == nil {
			c, err := l.d.listen(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(250 * time.Millisecond):
				}
				continue
			}
			conn = c
			if err := l.catchUp(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				conn = l.again(ctx, conn, err)
				continue
			}
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The connection is gone; what was committed meanwhile is
			// in the database, and subscribers replay it from there.
			conn.Close(context.Background())
			conn = nil
			if l.onErr != nil {
				l.onErr(err)
			}
			continue
		}
		if n.Channel == interruptChannel {
			if l.onInterrupt != nil {
				l.onInterrupt(n.Payload)
			}
			continue
		}
		var hn horizonNotice
		if err := json.Unmarshal([]byte(n.Payload), &hn); err != nil {
			if l.onErr != nil {
				l.onErr(fmt.Errorf("pg: bad event notice: %w", err))
			}
			continue
		}
		l.d.announcer.saw(hn.H)
		if hn.E != nil && hn.F <= l.last && l.publish != nil {
			// The notice carries every event after what was handed on.
			l.deliverNotice(hn)
			continue
		}
		if err := l.deliverUpTo(ctx, hn.H); err != nil {
			if ctx.Err() != nil {
				return
			}
			// Read them again after reconnecting (catchUp): no later
			// notice need come.
			conn = l.again(ctx, conn, err)
		}
	}
}

// again reports err, a failed read of announced events, closes conn and
// waits a moment, so that the loop reconnects and reads them again
// (catchUp). It returns the nil connection.
func (l *listener) again(ctx context.Context, conn *pgx.Conn, err error) *pgx.Conn {
	if l.onErr != nil {
		l.onErr(err)
	}
	conn.Close(context.Background())
	select {
	case <-ctx.Done():
	case <-time.After(250 * time.Millisecond):
	}
	return nil
}

// deliverUpTo hands on the events after the last horizon handed on, up to
// h, in id order.
func (l *listener) deliverUpTo(ctx context.Context, h int64) error {
	if h <= l.last {
		return nil
	}
	if l.publish == nil {
		l.last = h
		return nil
	}
	for {
		evs, err := sqlstore.ScanEvents(pgConn{l.d.pool}.Query(ctx, `SELECT `+sqlstore.EventColumns+` FROM events
			WHERE id > ? AND id <= ? ORDER BY id LIMIT 1000`, l.last, h))
		if err != nil {
			return fmt.Errorf("pg: read announced events: %w", err)
		}
		if len(evs) > 0 {
			l.last = evs[len(evs)-1].ID
			l.publish(evs)
		}
		if len(evs) < 1000 {
			l.last = h
			return nil
		}
	}
}

// deliverNotice hands on the events of a notice that carries every event
// after the last horizon handed on, up to its own.
func (l *listener) deliverNotice(hn horizonNotice) {
	if hn.H <= l.last {
		return
	}
	var out []*spec.Event
	for _, w := range *hn.E {
		if w.ID > l.last {
			out = append(out, &spec.Event{ID: w.ID, RunID: w.RunID, UserID: w.UserID, Seq: w.Seq, Type: w.Type, Data: w.Data,
				CreatedAt: time.UnixMilli(w.CreatedAt).UTC()})
		}
	}
	l.last = hn.H
	if len(out) > 0 {
		l.publish(out)
	}
}

// catchUp hands on, after a reconnection, the events committed since the
// last horizon handed on, which no notification announced while the
// connection was lost: a subscriber following a run would otherwise not
// hear of them until the next announcement (and the run's last event has
// none after it).
func (l *listener) catchUp(ctx context.Context) error {
	h, err := l.d.feedHorizon(ctx)
	if err != nil {
		return fmt.Errorf("pg: catch up on events: %w", err)
	}
	return l.deliverUpTo(ctx, h)
}
