package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"homework/db/sqlstore"
	"homework/engine/spec"
	"runtime"
	"strings"
)

// AppendEvent appends an event of typ with data (marshalled to JSON) to the
// run's log inside tx and returns it (its id is drawn when it is written).
// It takes its seq at once and is written with the other events appended
// since the transaction's last statement, in one insert, before its next
// statement or its commit: a finishing iteration's events cost one
// statement, not one each. It is published after tx commits.
func (tx *Tx) AppendEvent(ctx context.Context, runID string, typ spec.EventType, data any) (*spec.Event, error) {
	b, err := sqlstore.MarshalEventData(data)
	if err != nil {
		return nil, err
	}
	e := &spec.Event{RunID: runID, Type: typ, Data: b, CreatedAt: tx.Now()}
	if err := tx.takeSeqs(ctx, []*spec.Event{e}); err != nil {
		return nil, err
	}
	tx.unwritten = append(tx.unwritten, e)
	tx.events = append(tx.events, e)
	return e, nil
}

// writeEvents writes the events appended since the transaction's last
// statement. A failure is kept, and fails the commit.
func (tx *Tx) writeEvents(ctx context.Context) error {
	if tx.writeErr != nil || len(tx.unwritten) == 0 {
		return tx.writeErr
	}
	evs := tx.unwritten
	tx.unwritten = nil
	tx.writeErr = tx.insertEvents(ctx, evs, eventInserts)
	return tx.writeErr
}

// eventsFirst is a write transaction's statements: each first writes the
// events appended before it, so the transaction reads what it wrote.
type eventsFirst struct{ tx *Tx }

func (q eventsFirst) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := q.tx.writeEvents(ctx); err != nil {
		return nil, err
	}
	return q.tx.SQL.ExecContext(ctx, query, args...)
}

func (q eventsFirst) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := q.tx.writeEvents(ctx); err != nil {
		return nil, err
	}
	return q.tx.SQL.QueryContext(ctx, query, args...)
}

// QueryRowContext cannot return the events' error: it is kept and fails
// the commit.
func (q eventsFirst) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	q.tx.writeEvents(ctx)
	return q.tx.SQL.QueryRowContext(ctx, query, args...)
}

// seqState is a run's next event seq and owner.
type seqState struct {
	userID int64
	next   int64
}

// seqCache keeps runs' next event seq between write transactions, so an
// append need not read MAX(seq). It is one of the store's single-process
// assumptions, and the seam for the multi-process one:
//
//   - processSeqs (the default) is exact only while this process is the
//     database's one writer: Options.Lock keeps other servers out and
//     writeMu orders this process's transactions. A transaction that does
//     not commit forgets the runs it touched, which then reload.
//   - noSeqs (Options.SharedWriters) caches nothing: every transaction reads
//     the run's MAX(seq) under the database's write lock (SQLite's BEGIN
//     IMMEDIATE), so seqs stay gap-free with several writing processes. A
//     PostgreSQL store does the same under a row lock on the run.
type seqCache interface {
	get(runID string) *seqState
	put(runID string, st *seqState)
	forget(runID string)
}

// processSeqs is the single-writer seq cache; guarded by writeMu.
type processSeqs map[string]*seqState

func (c processSeqs) get(runID string) *seqState { return c[runID] }
func (c processSeqs) forget(runID string)        { delete(c, runID) }
func (c processSeqs) put(runID string, st *seqState) {
	if len(c) >= 100_000 {
		clear(c) // bound the cache; entries reload on use
	}
	c[runID] = st
}

// noSeqs caches nothing, for databases other processes write too.
type noSeqs struct{}

func (noSeqs) get(string) *seqState  { return nil }
func (noSeqs) put(string, *seqState) {}
func (noSeqs) forget(string)         {}

// nextSeq returns the run's seq state for this transaction, loading it on
// first use. A missing run is ENOTFOUND.
func (tx *Tx) nextSeq(ctx context.Context, runID string) (*seqState, error) {
	if st, ok := tx.seqs[runID]; ok {
		return st, nil
	}
	st := tx.db.seqs.get(runID)
	if st == nil {
		st = &seqState{}
		err := tx.SQL.QueryRowContext(ctx, `SELECT r.user_id, COALESCE((SELECT MAX(seq) FROM events WHERE run_id = r.id), 0) + 1
			FROM runs r WHERE r.id = ?`, runID).Scan(&st.userID, &st.next)
		if err == sql.ErrNoRows {
			return nil, spec.Errorf(spec.ENOTFOUND, "Run not found.")
		} else if err != nil {
			return nil, fmt.Errorf("load event seq: %w", err)
		}
		tx.db.seqs.put(runID, st)
	}
	tx.seqs[runID] = st
	return st, nil
}

// maxEventChunk is the most rows one event insert writes.
const maxEventChunk = 128

// eventInserts and groupInserts hold the multi-row event insert of each
// power-of-two chunk size, built once: the writer runs one on every append.
// A failing eventInserts statement undoes its own rows, and its transaction
// goes on (to fail its commit, see writeEvents); a failing groupInserts
// statement rolls back its whole transaction, a group commit's, which fails
// with it anyway. So only the first needs a statement journal, into which
// SQLite copies every page a multi-row statement is about to change, to
// undo the statement alone: a sixth of inserting the rows.
var eventInserts, groupInserts = chunkInserts("INSERT"), chunkInserts("INSERT OR ROLLBACK")

func chunkInserts(verb string) map[int]string {
	out := map[int]string{}
	for n := 1; n <= maxEventChunk; n *= 2 {
		out[n] = verb + ` INTO events (run_id, user_id, seq, type, data, created_at) VALUES (?,?,?,?,?,?)` +
			strings.Repeat(",(?,?,?,?,?,?)", n-1)
	}
	return out
}

// takeSeqs gives evs, in order, their runs' next seqs and their user ids.
// A missing run is ENOTFOUND, with no seq taken.
func (tx *Tx) takeSeqs(ctx context.Context, evs []*spec.Event) error {
	for _, e := range evs {
		st, err := tx.nextSeq(ctx, e.RunID)
		if err != nil {
			return err
		}
		e.UserID, e.Seq = st.userID, st.next
		st.next++
	}
	return nil
}

// insertEvents inserts evs, which have their seqs, filling in their ids,
// with as few statements as possible: multi-row inserts from inserts
// (eventInserts or groupInserts) in power-of-two chunks, so a handful of
// prepared statements serve every batch size.
//
// The ids are not read back (RETURNING made SQLite produce, and the driver
// convert, a row per event: half an append's cost under load). With the
// writer held, one INSERT's rows take consecutive AUTOINCREMENT ids in the
// order of its VALUES, the last of them last_insert_rowid(); a statement
// that did not insert every row fails the append.
func (tx *Tx) insertEvents(ctx context.Context, evs []*spec.Event, inserts map[int]string) error {
	// The arguments, boxed: a user id and a time are boxed once for the
	// rows they repeat in (a group's rows mostly share both), and the type
	// is passed as a plain string, which database/sql takes as it is
	// instead of converting it by reflection.
	args := make([]any, 0, 6*min(len(evs), maxEventChunk))
	var userID, createdAt any
	for len(evs) > 0 {
		n := 1
		for n*2 <= len(evs) && n < maxEventChunk {
			n *= 2
		}
		chunk := evs[:n]
		evs = evs[n:]
		args = args[:0]
		for _, e := range chunk {
			if id, ok := userID.(int64); !ok || id != e.UserID {
				userID = e.UserID
			}
			if ms, ok := createdAt.(int64); !ok || ms != e.CreatedAt.UnixMilli() {
				createdAt = e.CreatedAt.UnixMilli()
			}
			args = append(args, e.RunID, userID, e.Seq, string(e.Type), string(e.Data), createdAt)
		}
		res, err := tx.SQL.ExecContext(ctx, inserts[n], args...)
		if err != nil {
			return fmt.Errorf("append events: %w", err)
		}
		rows, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("append events: %w", err)
		}
		last, err := res.LastInsertId()
		if err != nil {
			return fmt.Errorf("append events: %w", err)
		}
		if rows != int64(n) {
			return fmt.Errorf("append events: %d of %d rows inserted", rows, n)
		}
		for i, e := range chunk {
			e.ID = last - int64(n-1-i)
		}
	}
	return nil
}

// appendReq is one caller's part of a group commit: an event to append,
// or a write (GroupWriteTx) to make in the group's transaction.
type appendReq struct {
	ev   *spec.Event
	fn   func(tx *Tx) error
	done chan error
}

// errLead, received on a waiting caller's done channel, makes it the
// leader of the next group commit (its own append is still pending).
var errLead = errors.New("lead the next group commit")

// errAlone, received on a caller's done channel, says the group's
// transaction failed while it held a GroupWriteTx write: nobody can tell
// whose part failed it, so each caller makes its own write again, alone.
var errAlone = errors.New("write alone")

// AppendEvent appends one event outside any other transaction. Concurrent
// callers are group-committed: one caller, the leader, commits every
// pending append in one transaction while the others wait for their
// result. Throughput grows with concurrency instead of paying one commit
// per event. A leader commits one batch (its own append is in it) and then
// hands the lead to a waiting caller, so under steady load no caller leads
// forever while its own append is long committed.
func (d *DB) AppendEvent(ctx context.Context, runID string, typ spec.EventType, data any) (*spec.Event, error) {
	b, err := sqlstore.MarshalEventData(data)
	if err != nil {
		return nil, err
	}
	req := &appendReq{ev: &spec.Event{RunID: runID, Type: typ, Data: b}}
	if err := d.group(ctx, req); err != errAlone {
		return req.ev, err
	}
	var ev *spec.Event
	err = d.write(ctx, func(tx *Tx) error {
		ev, err = tx.AppendEvent(ctx, runID, typ, data)
		return err
	})
	return ev, err
}

// GroupWriteTx runs fn in a write transaction shared with the event
// appends and the other GroupWriteTx writes pending at the time (see
// AppendEvent), and returns once that transaction committed: a small write
// that must commit at once (a model call's record) then shares its commit,
// whose cost is mostly the pages it writes, with the others'. fn runs in
// the leader's goroutine, after the appends queued before it are written;
// its events are written before the writes queued after it. When the
// shared transaction fails, fn runs again in a transaction of its own,
// whose error GroupWriteTx returns; so fn may run twice, and must leave
// nothing behind but what it writes in tx (and its result, set anew on
// each run). fn's ctx should not end before it returns.
func (d *DB) GroupWriteTx(ctx context.Context, fn func(tx spec.Tx) error) error {
	req := &appendReq{fn: func(tx *Tx) error { return fn(tx) }}
	if err := d.group(ctx, req); err != errAlone {
		return err
	}
	return d.write(ctx, req.fn)
}

// group queues req for the next group commit, leading it when no one
// does, and returns req's result.
func (d *DB) group(ctx context.Context, req *appendReq) error {
	req.done = make(chan error, 1)
	d.pendingMu.Lock()
	d.pending = append(d.pending, req)
	if d.leading {
		d.pendingMu.Unlock()
		if err := <-req.done; err != errLead {
			return err
		}
	} else {
		d.leading = true
		d.pendingMu.Unlock()
	}
	d.leadOnce(ctx)
	return <-req.done
}

// leadOnce commits the pending appends, the leader's own among them, then
// hands the lead to the oldest waiting caller, or gives it up when none
// waits.
func (d *DB) leadOnce(ctx context.Context) {
	// Let the callers the last commit released run first: they are ready
	// on this goroutine's processor and would otherwise wait for the next
	// commit to end, so their appends queue now and join this batch.
	runtime.Gosched()
	// The batch is taken once the writer is this leader's: appends that
	// come while another write transaction holds it join this commit
	// instead of waiting for the next.
	d.writeMu.Lock()
	batch, results := d.commitPending(ctx)
	d.writeMu.Unlock()
	// The lead passes on before this batch's callers hear their results,
	// so the next commit begins while they wake.
	d.pendingMu.Lock()
	if len(d.pending) == 0 {
		d.leading = false
		d.pendingMu.Unlock()
	} else {
		// Only a leader takes batches, so next stays pending until it leads.
		next := d.pending[0]
		d.pendingMu.Unlock()
		next.done <- errLead
	}
	for i, r := range batch {
		r.done <- results[i]
	}
}

// groupWrite runs a GroupWriteTx write in the leader's transaction. A
// panic fails the group (so its caller makes the write again alone, and
// panics in its own goroutine) instead of the leader, which holds the
// writer and the other callers' results.
func groupWrite(fn func(tx *Tx) error, tx *Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("group write panicked: %v", p)
		}
	}()
	return fn(tx)
}

// maxGroupCommit is about the most appends one group commit takes: past
// it the leader commits even while more keep coming, so an append waits
// for at most about this many others' rows.
const maxGroupCommit = 512

// takePending takes the appends waiting to be committed.
func (d *DB) takePending() []*appendReq {
	d.pendingMu.Lock()
	defer d.pendingMu.Unlock()
	batch := d.pending
	d.pending = nil
	return batch
}

// commitPending commits the pending appends in one transaction. It inserts
// what is pending, then what came meanwhile, until nothing is pending (or
// maxGroupCommit is reached), and commits once: a commit costs mostly by
// the pages it writes (every run's index page, however few rows each got),
// so the appends that arrive while the first rows go in share that cost
// instead of paying it again in the next commit. When nothing is pending
// it yields once before committing: the callers the last commit woke were
// made ready on the processor their leader ran on and mostly still wait
// there, and their next appends then join this commit instead of paying
// for the next one. With nothing else to run the yield returns at once, so
// a lone append still commits at once. An append to an unknown run is
// reported to its caller alone; the others still commit. GroupWriteTx
// writes run in their place in the queue; when the transaction fails with
// one among them, every caller is told errAlone. It returns the requests it
// took and each one's result, for the leader to tell their callers. The
// caller holds writeMu.
func (d *DB) commitPending(ctx context.Context) ([]*appendReq, []error) {
	// The batch commits even if the leader's own context ends: the other
	// callers are waiting on it.
	ctx = context.WithoutCancel(ctx)
	var batch []*appendReq
	var results []error
	writes := false
	err := d.writeTxLocked(ctx, func(tx *Tx) error {
		yielded := false
		for len(batch) < maxGroupCommit {
			more := d.takePending()
			if len(more) == 0 {
				if yielded {
					return nil
				}
				runtime.Gosched()
				yielded = true
				continue
			}
			yielded = false
			first := len(batch)
			batch = append(batch, more...)
			results = append(results, make([]error, len(more))...)
			evs := make([]*spec.Event, 0, len(more))
			for i, r := range more {
				if r.fn != nil {
					// The appends before it first, and its own events
					// before those after it: ids follow seqs.
					writes = true
					if err := tx.insertEvents(ctx, evs, groupInserts); err != nil {
						return err
					}
					tx.events = append(tx.events, evs...)
					evs = evs[:0]
					if err := groupWrite(r.fn, tx); err != nil {
						return err
					}
					if err := tx.writeEvents(ctx); err != nil {
						return err
					}
					continue
				}
				r.ev.CreatedAt = tx.Now()
				if err := tx.takeSeqs(ctx, []*spec.Event{r.ev}); err != nil {
					if spec.ErrorCode(err) == spec.ENOTFOUND {
						results[first+i] = err
						continue
					}
					return err
				}
				evs = append(evs, r.ev)
			}
			if err := tx.insertEvents(ctx, evs, groupInserts); err != nil {
				return err
			}
			tx.events = append(tx.events, evs...)
		}
		return nil
	})
	if err != nil {
		if writes {
			err = errAlone
		}
		for i := range results {
			results[i] = err
		}
	}
	return batch, results
}
