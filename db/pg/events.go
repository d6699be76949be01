package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
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

// seqSQL takes n seqs of the run at once, for a committing transaction's
// events (notifyEvents). The UPDATE row-locks the run until the
// transaction ends, so appends to one run from any process are serialised
// and gap-free.
const seqSQL = `UPDATE runs SET last_seq = last_seq + $2 WHERE id = $1 RETURNING user_id`

// AppendEvent appends an event of typ with data (marshalled to JSON) to the
// run's log inside tx. Nothing is sent yet: the event takes its seq and id
// and is written when tx commits (notifyEvents), and then announced to
// every process. Until then its Seq (and its UserID, unless this process
// knows the run's user) is zero.
func (tx *Tx) AppendEvent(ctx context.Context, runID string, typ spec.EventType, data any) (*spec.Event, error) {
	b, err := sqlstore.MarshalEventData(data)
	if err != nil {
		return nil, err
	}
	e := &spec.Event{RunID: runID, Type: typ, Data: b, CreatedAt: tx.Now()}
	e.UserID, _ = tx.db.runUsers.user(runID)
	tx.events = append(tx.events, e)
	return e, nil
}

// runUsers keeps the user of the runs this process appended to: a run's
// user never changes, and a committing transaction takes its users' feed
// locks in the same round trip as the rest when it knows them.
type runUsers struct {
	mu sync.Mutex
	m  map[string]int64
}

// maxRunUsers bounds runUsers; past it, it starts over.
var maxRunUsers = 100_000

func (r *runUsers) user(runID string) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.m[runID]
	return u, ok
}

func (r *runUsers) learn(runID string, user int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRunUsers {
		r.m = map[string]int64{}
	}
	r.m[runID] = user
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
// append order in $1..$4, with fresh ids from the sequence in that same
// order, and announces them on channel $5: the events themselves, or only
// their ids when the payload would exceed $6 bytes. An event's seq is its
// place among the transaction's events of its run, counted back from the
// run's last_seq, which the transaction has just advanced by their number
// (seqSQL); its user is the run's. An event of a run that is not there
// fails the statement (its user and seq are null). It returns the new ids in append order (id order too, as they
// are drawn in that order), their seqs, and whether it announced them;
// when even the ids exceed $6 bytes (a transaction of many hundreds of
// events) the caller announces them in chunks.
// The ids are drawn in a materialised CTE and matched by rank, so their
// order does not depend on how the planner evaluates nextval. The payload
// has the shape of notice (wireEvent's keys).
const announceSQL = `WITH n AS MATERIALIZED (SELECT nextval(pg_get_serial_sequence('events', 'id')) AS new
		FROM generate_series(1, cardinality($1::text[]))),
	s AS (SELECT new, row_number() OVER (ORDER BY new) AS ord FROM n),
	a AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
		WITH ORDINALITY AS a(run_id, type, data, created_at, ord)),
	u AS (SELECT a.*, runs.user_id, runs.last_seq - count(*) OVER (PARTITION BY a.run_id)
			+ row_number() OVER (PARTITION BY a.run_id ORDER BY a.ord) AS seq
		FROM a LEFT JOIN runs ON runs.id = a.run_id),
	r AS (INSERT INTO events (id, run_id, user_id, seq, type, data, created_at)
		SELECT s.new, u.run_id, u.user_id, u.seq, u.type, u.data, u.created_at FROM u JOIN s USING (ord)
		RETURNING id, run_id, user_id, seq, type, data, created_at),
	p AS (SELECT array_agg(id ORDER BY id) AS ids, array_agg(seq ORDER BY id) AS seqs,
		json_build_object('e', json_agg(json_build_object('i', id, 'r', run_id, 'u', user_id, 's', seq, 't', type,
			'd', data::json, 'c', created_at) ORDER BY id))::text AS whole,
		json_build_object('ids', json_agg(id ORDER BY id))::text AS short FROM r)
	SELECT ids, seqs, CASE WHEN octet_length(whole) <= $6 THEN pg_notify($5, whole) WHEN octet_length(short) <= $6 THEN pg_notify($5, short) END,
		octet_length(whole) <= $6 OR octet_length(short) <= $6 FROM p`

// idsPerNotice bounds the ids of one chunked notice well under maxPayload.
const idsPerNotice = 400

// commitWithEvents is the most events whose ids announceSQL is sure to
// announce in one notification (at most 20 digits and a comma each, under
// maxPayload), so that the transaction may commit in the same round trip.
const commitWithEvents = 300

// notifyEvents takes the seqs of the transaction's events, writes them and
// announces them, just before commit, in the user feed's order, which is
// the commit order; NOTIFY is delivered at commit, in commit order, and not
// at all on rollback.
//
// First each run's counter is advanced by its events (seqSQL, in run
// order), which row-locks the run until the transaction ends.
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
// order. The counters, the locks and announceSQL go in one round trip (two
// when this process does not know a run's user yet: the counters' answer
// says it) and the holder runs nothing else before COMMIT, so the lock is
// short and cannot close a cycle with the row locks others wait on (the
// events' runs are locked by then; the insert's key checks wait on nothing
// else).
//
// Each event is written once, here: appending sent nothing.
//
// When the ids of the transaction's events fit in one notification, which
// announceSQL then sends at least, COMMIT goes in the same round trip
// (committed is true): the feed locks are held for no round trip of their
// own, and the transaction takes one fewer. Any error in the round trip
// skips what follows it, COMMIT included.
func (tx *Tx) notifyEvents(ctx context.Context) (committed bool, err error) {
	if len(tx.events) == 0 {
		return false, nil
	}
	n := len(tx.events)
	counts := map[string]int64{}
	for _, e := range tx.events {
		counts[e.RunID]++
	}
	runIDs := slices.Sorted(maps.Keys(counts))
	// The runs' users, as this process knows them; the counters' answer
	// says the others. Kept here, not read again: the shared map may start
	// over meanwhile.
	userOf := make(map[string]int64, len(runIDs))
	known := true
	for _, id := range runIDs {
		u, ok := tx.db.runUsers.user(id)
		known = known && ok
		userOf[id] = u
	}
	b := &pgx.Batch{}
	for _, id := range runIDs {
		b.Queue(seqSQL, id, counts[id])
	}
	if !known {
		// The counters first, for the runs' users; then the rest.
		br := tx.PG.SendBatch(ctx, b)
		err := tx.advanceCounters(br, runIDs, userOf)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return false, err
		}
		b = &pgx.Batch{}
	}
	users := make([]int64, 0, 1)
	for _, u := range userOf {
		if !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	slices.Sort(users)
	runs, types, data, created := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, e := range tx.events {
		runs[i], types[i], data[i], created[i] = e.RunID, string(e.Type), string(e.Data), e.CreatedAt.UnixMilli()
	}
	for _, u := range users {
		b.Queue(`SELECT pg_advisory_xact_lock($1::int4, $2::int4)`, int32(feedLock), int32(u))
	}
	// PostgreSQL plans announceSQL afresh for every call by default (its
	// estimate for a plan made for any array is worse than for the arrays
	// it is given), which cost more than running it; the plan it makes
	// once does as well.
	b.Queue(`SET LOCAL plan_cache_mode = force_generic_plan`)
	b.Queue(announceSQL, runs, types, data, created, eventsChannel, maxPayload)
	commit := n <= commitWithEvents
	if commit {
		b.Queue(`COMMIT`)
	}
	br := tx.PG.SendBatch(ctx, b)
	defer br.Close()
	if known {
		if err := tx.advanceCounters(br, runIDs, nil); err != nil {
			return false, err
		}
	}
	for _, e := range tx.events {
		e.UserID = userOf[e.RunID]
	}
	for range users {
		if _, err := br.Exec(); err != nil {
			return false, fmt.Errorf("lock user feed: %w", err)
		}
	}
	if _, err := br.Exec(); err != nil {
		return false, fmt.Errorf("plan event writes: %w", err)
	}
	var ids, seqs []int64
	var void any
	var announced bool
	if err := br.QueryRow().Scan(&ids, &seqs, &void, &announced); err != nil {
		return false, fmt.Errorf("write and announce events: %w", err)
	}
	if len(ids) != n || len(seqs) != n {
		// Not with commit: announceSQL fails rather than write fewer.
		return false, fmt.Errorf("write events: %d of %d events written", len(ids), n)
	}
	for i, id := range ids {
		tx.events[i].ID, tx.events[i].Seq = id, seqs[i]
	}
	if commit {
		if _, err := br.Exec(); err != nil {
			return false, fmt.Errorf("commit: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return false, err
	}
	if announced {
		return commit, nil
	}
	// Too many for one notification: their ids in order, a chunk per
	// notification, sent one after another so they arrive in that order.
	for chunk := range slices.Chunk(ids, idsPerNotice) {
		payload, err := json.Marshal(notice{IDs: chunk})
		if err != nil {
			return false, err
		}
		if _, err := tx.PG.Exec(ctx, `SELECT pg_notify($1, $2)`, eventsChannel, string(payload)); err != nil {
			return false, fmt.Errorf("announce events: %w", err)
		}
	}
	return false, nil
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

// advanceCounters reads the answers of seqSQL for runIDs from br, and
// learns each run's user, into userOf too when it is not nil. A run that
// is not there is ENOTFOUND. A run's user never changes and run ids are
// never used again, so a user this process knew is the one it reads.
func (tx *Tx) advanceCounters(br pgx.BatchResults, runIDs []string, userOf map[string]int64) error {
	for _, id := range runIDs {
		var user int64
		if err := br.QueryRow().Scan(&user); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return spec.Errorf(spec.ENOTFOUND, "Run not found.")
			}
			return fmt.Errorf("take event seqs: %w", err)
		}
		tx.db.runUsers.learn(id, user)
		if userOf != nil {
			userOf[id] = user
		}
	}
	return nil
}
