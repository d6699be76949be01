package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/sqlstore"
	"homework/engine/spec"
)

// NOTIFY channels: committed events, and runs whose iteration must stop.
const (
	eventsChannel    = "homework_events"
	interruptChannel = "homework_interrupts"
)

// maxPayload keeps a notification under PostgreSQL's 8000-byte limit; a
// transaction whose events do not fit announces only their ids.
const maxPayload = 7000

// lockSeqSQL locks the run for the transaction's first append to it and
// reads its counter. The lock (the one an UPDATE of the row takes, without
// writing the row) is held until the transaction ends, so appends to one
// run from any process are serialised and gap-free: the transaction numbers
// its events on from last_seq itself, and writes the counter once, when it
// commits (notifyEvents). A runs row is wide (its configuration, metrics
// and generated search columns), so writing it for every event cost more
// than the events.
const lockSeqSQL = `SELECT user_id, last_seq FROM runs WHERE id = $1 FOR NO KEY UPDATE`

// seqSQL writes a run's counter after the transaction's appends to it.
const seqSQL = `UPDATE runs SET last_seq = $2 WHERE id = $1`

// runSeq is a run's counter as a transaction holds it: the last seq it
// gave, and the one in the row.
type runSeq struct {
	userID, last, stored int64
}

// AppendEvent appends an event of typ with data (marshalled to JSON) to the
// run's log inside tx. It takes its seq now (the first append to a run
// locks the run); the row is written, with its id, when tx commits
// (notifyEvents), and then announced to every process.
func (tx *Tx) AppendEvent(ctx context.Context, runID string, typ spec.EventType, data any) (*spec.Event, error) {
	b, err := sqlstore.MarshalEventData(data)
	if err != nil {
		return nil, err
	}
	s := tx.seqs[runID]
	if s == nil {
		s = &runSeq{}
		err = tx.PG.QueryRow(ctx, lockSeqSQL, runID).Scan(&s.userID, &s.last)
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, spec.Errorf(spec.ENOTFOUND, "Run not found.")
			}
			return nil, err
		}
		s.stored = s.last
		if tx.seqs == nil {
			tx.seqs = map[string]*runSeq{}
		}
		tx.seqs[runID] = s
	}
	s.last++
	e := &spec.Event{RunID: runID, UserID: s.userID, Seq: s.last, Type: typ, Data: b, CreatedAt: tx.Now()}
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

// wireEvent is an event in a notification; unlike spec.Event's JSON it
// carries the user id.
type wireEvent struct {
	ID        int64           `json:"i"`
	RunID     string          `json:"r"`
	UserID    int64           `json:"u"`
	Seq       int64           `json:"s"`
	Type      spec.EventType  `json:"t"`
	Data      json.RawMessage `json:"d"`
	CreatedAt int64           `json:"c"`
}

// notice is one transaction's announcement: its events, or only their ids
// when they are too large for a notification.
type notice struct {
	Events []wireEvent `json:"e,omitempty"`
	IDs    []int64     `json:"ids,omitempty"`
}

// feedLock is the first key of the per-user advisory lock under which a
// committing transaction draws its events' ids and writes them, for the
// user feed.
const feedLock = 0x46656564 // "Feed"

// announceSQL writes a transaction's events, given column by column in
// append order in $1..$6, with fresh ids from the sequence in that same
// order, and announces them on channel $7: the events themselves, or only
// their ids when the payload would exceed $8 bytes. It returns the new ids
// in append order (id order too, as they are drawn in that order) and
// whether it announced them; when even the ids exceed
// $8 bytes (a transaction of many hundreds of events) the caller announces
// them in chunks.
// The ids are drawn in a materialised CTE and matched by rank, so their
// order does not depend on how the planner evaluates nextval. The payload
// has the shape of notice (wireEvent's keys).
const announceSQL = `WITH n AS MATERIALIZED (SELECT nextval(pg_get_serial_sequence('events', 'id')) AS new
		FROM generate_series(1, cardinality($1::text[]))),
	s AS (SELECT new, row_number() OVER (ORDER BY new) AS ord FROM n),
	u AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::bigint[])
		WITH ORDINALITY AS u(run_id, user_id, seq, type, data, created_at, ord)),
	r AS (INSERT INTO events (id, run_id, user_id, seq, type, data, created_at)
		SELECT s.new, u.run_id, u.user_id, u.seq, u.type, u.data, u.created_at FROM u JOIN s USING (ord)
		RETURNING id, run_id, user_id, seq, type, data, created_at),
	p AS (SELECT array_agg(id ORDER BY id) AS ids,
		json_build_object('e', json_agg(json_build_object('i', id, 'r', run_id, 'u', user_id, 's', seq, 't', type,
			'd', data::json, 'c', created_at) ORDER BY id))::text AS whole,
		json_build_object('ids', json_agg(id ORDER BY id))::text AS short FROM r)
	SELECT ids, CASE WHEN octet_length(whole) <= $8 THEN pg_notify($7, whole) WHEN octet_length(short) <= $8 THEN pg_notify($7, short) END,
		octet_length(whole) <= $8 OR octet_length(short) <= $8 FROM p`

// idsPerNotice bounds the ids of one chunked notice well under maxPayload.
const idsPerNotice = 400

// notifyEvents writes the transaction's events and announces them, just
// before commit, in the user feed's order, which is the commit order;
// NOTIFY is delivered at commit, in commit order, and not at all on
// rollback.
//
// An event's id comes from a sequence, so had it been drawn when the event
// was appended, two transactions of one user could commit out of id order,
// and a feed reader that had already passed the later id would never see
// the earlier one. So the transaction takes a transaction-scoped advisory
// lock per user of its events (in user order, so two holders never wait on
// each other), and only then draws its events' ids, in append order, and
// writes them. The lock is held until the commit is visible (PostgreSQL
// releases locks after that), so of two transactions of one user the one
// that numbers second draws larger ids and becomes visible later: whenever
// a reader sees a user's event, it sees every event of that user with a
// smaller id that will ever commit, and the bus gets a user's events in id
// order. The lock and announceSQL go in one round trip and the holder runs
// nothing else before COMMIT, so the lock is short and cannot close a cycle
// with the row locks others wait on (the events' runs are already locked by
// their seqs; the insert's key checks wait on nothing else).
//
// Each event is written once, here: appending only took its seq. The
// runs' counters are written first, in the same round trip; the
// transaction holds their rows already.
func (tx *Tx) notifyEvents(ctx context.Context) error {
	if len(tx.events) == 0 {
		return nil
	}
	users := make([]int64, 0, 1)
	n := len(tx.events)
	runs, userIDs, seqs, types, data, created := make([]string, n), make([]int64, n), make([]int64, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, e := range tx.events {
		runs[i], userIDs[i], seqs[i], types[i], data[i], created[i] = e.RunID, e.UserID, e.Seq, string(e.Type), string(e.Data), e.CreatedAt.UnixMilli()
		if !slices.Contains(users, e.UserID) {
			users = append(users, e.UserID)
		}
	}
	slices.Sort(users)
	b := &pgx.Batch{}
	counters := 0
	for runID, s := range tx.seqs {
		if s.last != s.stored {
			b.Queue(seqSQL, runID, s.last)
			counters++
		}
	}
	for _, u := range users {
		b.Queue(`SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, int32(feedLock), int32(u))
	}
	b.Queue(announceSQL, runs, userIDs, seqs, types, data, created, eventsChannel, maxPayload)
	br := tx.PG.SendBatch(ctx, b)
	defer br.Close()
	for range counters {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("write event counter: %w", err)
		}
	}
	for range users {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("lock user feed: %w", err)
		}
	}
	var ids []int64
	var void any
	var announced bool
	if err := br.QueryRow().Scan(&ids, &void, &announced); err != nil {
		return fmt.Errorf("write and announce events: %w", err)
	}
	if len(ids) != n {
		return fmt.Errorf("write events: %d of %d events written", len(ids), n)
	}
	for i, id := range ids {
		tx.events[i].ID = id
	}
	if err := br.Close(); err != nil {
		return err
	}
	if announced {
		return nil
	}
	// Too many for one notification: their ids in order, a chunk per
	// notification, sent one after another so they arrive in that order.
	for chunk := range slices.Chunk(ids, idsPerNotice) {
		payload, err := json.Marshal(notice{IDs: chunk})
		if err != nil {
			return err
		}
		if _, err := tx.PG.Exec(ctx, `SELECT pg_notify($1, $2)`, eventsChannel, string(payload)); err != nil {
			return fmt.Errorf("announce events: %w", err)
		}
	}
	return nil
}

// listener holds one connection that LISTENs for committed events and hands
// them to OnEvents in the order they were committed.
type listener struct {
	d           *DB
	publish     func([]*spec.Event)
	onInterrupt func(runID string)
	onErr       func(error)
	cancel      context.CancelFunc
	done        chan struct{}
	// last is the highest event id known to be delivered: at a
	// reconnection, the events committed after it while the connection
	// was lost are read back and handed on (catchUp).
	last int64
}

func startListener(ctx context.Context, d *DB, opts Options) (*listener, error) {
	conn, err := d.listen(ctx)
	if err != nil {
		return nil, err
	}
	var last int64
	if err := d.pool.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&last); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("pg: listener start: %w", err)
	}
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
			if err := l.catchUp(ctx); err != nil && ctx.Err() == nil && l.onErr != nil {
				l.onErr(err)
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
		if l.publish == nil {
			continue
		}
		evs, err := l.decode(ctx, n.Payload)
		if err != nil {
			if l.onErr != nil {
				l.onErr(err)
			}
			continue
		}
		l.deliver(evs)
	}
}

// deliver hands evs on and remembers the highest id.
func (l *listener) deliver(evs []*spec.Event) {
	if len(evs) == 0 {
		return
	}
	for _, e := range evs {
		l.last = max(l.last, e.ID)
	}
	l.publish(evs)
}

// catchUp hands on, after a reconnection, the events committed since the
// last one delivered, which no notification announced while the
// connection was lost: a subscriber following a run would otherwise not
// hear of them until the run's next event (and never, after its last).
// Events committed since the LISTEN may come again by their notification;
// subscribers skip what they have.
func (l *listener) catchUp(ctx context.Context) error {
	if l.publish == nil {
		return nil
	}
	for {
		evs, err := sqlstore.ScanEvents(pgConn{l.d.pool}.Query(ctx, `SELECT `+sqlstore.EventColumns+` FROM events WHERE id > ? ORDER BY id LIMIT 1000`, l.last))
		if err != nil {
			return fmt.Errorf("pg: catch up on events: %w", err)
		}
		l.deliver(evs)
		if len(evs) < 1000 {
			return nil
		}
	}
}

func (l *listener) decode(ctx context.Context, payload string) ([]*spec.Event, error) {
	var n notice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return nil, fmt.Errorf("pg: bad event notice: %w", err)
	}
	if len(n.IDs) > 0 {
		return l.d.eventsByID(ctx, n.IDs)
	}
	out := make([]*spec.Event, len(n.Events))
	for i, w := range n.Events {
		out[i] = &spec.Event{ID: w.ID, RunID: w.RunID, UserID: w.UserID, Seq: w.Seq, Type: w.Type, Data: w.Data,
			CreatedAt: time.UnixMilli(w.CreatedAt).UTC()}
	}
	return out, nil
}

func (d *DB) eventsByID(ctx context.Context, ids []int64) ([]*spec.Event, error) {
	return sqlstore.ScanEvents(pgConn{d.pool}.Query(ctx, `SELECT `+sqlstore.EventColumns+` FROM events WHERE id = ANY(?) ORDER BY id`, ids))
}
