package handlers

import (
	"context"
	"errors"
	"homework/engine/spec"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Stream verification.
//
// A stream sends an event only after its credential was found live by a
// check that started after the event was committed: for a live event, after
// it was published on the bus (the bus publishes after commit); for replayed
// events, after the replay page was read. So a credential revoked by any
// process, on any server sharing the database, reaches every stream before
// anything written after the revocation does, and the stream ends without
// sending it.
//
// The checks of all streams are coalesced by one verifier per server. A
// round is one store query (LiveCredentials) for every credential gathered
// into it; rounds run back to back only while someone waits. A round notes,
// as it starts, the server's clock: how many publishes the bus had begun
// plus how many heartbeats had ticked. A stream woken by events (or a tick)
// counted in that clock may take that round's answer for its credential,
// waiting for it if it is still running; otherwise it joins the next round.
// So the streams that wake, one after the other, for one published event or
// one tick of the shared heartbeat share one query, however many they are,
// and nothing is queried while no events flow and no heartbeat ticks.

// verifyTimeout bounds one round's query: a hung store ends the waiting
// streams (they reconnect and authenticate again) instead of holding them.
const verifyTimeout = 10 * time.Second

// afterNow asks for a check that starts after the call (no round under way
// or done can answer it).
const afterNow = math.MaxInt64

// verifier runs the coalesced credential checks of a server's streams.
type verifier struct {
	store spec.Store
	ctx   context.Context // the server's: cancelled at shutdown
	log   *slog.Logger
	// clock is the bus's count of publishes begun (Bus.Published) plus the
	// heartbeat's ticks: it only grows, and a stream that read n after
	// receiving an event (or a tick) knows the event was committed (the tick
	// happened) before the clock reached n.
	clock func() int64
	// waiting returns the credentials of streams that have events waiting
	// to be checked and sent; a round checks them too, so the streams
	// woken one after the other by one publish find it covers them.
	waiting func() []credential
	// ofUsers returns the credentials of the open streams of the users in
	// the set: a round kicked by a publish checks them (see kick).
	ofUsers func(users map[int64]bool) []credential

	mu      sync.Mutex
	next    *verifyRound // being gathered: its query has not started
	current *verifyRound // its query is running
	running bool         // a goroutine is running rounds
	// answered is the latest round answered, written under mu and read
	// without it too: most of the streams one publish wakes ask after the
	// round that covers them was answered, and take its answer without
	// queueing on mu behind the others.
	answered atomic.Pointer[verifyRound]

	// wg counts the round goroutine: started on demand by the first
	// waiting stream while ctx lives, it exits when no stream waits;
	// Server.Shutdown waits for it (stop) after cancelling ctx, which fails
	// a round under way at once.
	wg sync.WaitGroup

	rounds atomic.Int64 // rounds run, for tests
}

// verifyRound is one store query for the credentials gathered into it.
type verifyRound struct {
	creds map[credential]struct{}
	users map[int64]bool // kicked: the credentials of these users' open streams join it as it starts
	start int64          // clock() read just before the query started
	done  chan struct{}  // closed when the answer is in

	tokens, sessions map[string]bool // the live hashes
	err              error
}

// answer returns the round's verdict on cr; the round must be done.
func (r *verifyRound) answer(cr credential) (bool, error) {
	if r.err != nil {
		return false, errUnverified
	}
	if cr.session {
		return r.sessions[cr.hash], nil
	}
	return r.tokens[cr.hash], nil
}

// covers reports whether r checked cr in a query that started once the
// clock had reached after.
func (r *verifyRound) covers(cr credential, after int64) bool {
	if r == nil || r.start < after {
		return false
	}
	_, ok := r.creds[cr]
	return ok
}

// errUnverified ends a stream whose credential could not be checked.
var errUnverified = errors.New("the stream's credential could not be checked")

// stop waits for the round goroutine to exit; ctx must be cancelled. Taking
// mu first means no join that saw ctx alive is still about to start one.
func (v *verifier) stop() {
	v.mu.Lock()
	//lint:ignore SA2001 a barrier: see above
	v.mu.Unlock()
	v.wg.Wait()
}

// check reports whether cr authenticates, by a store query that started
// once the clock had reached after (afterNow: after this call). It returns
// early with stop's or ctx's end.
func (v *verifier) check(ctx context.Context, cr credential, after int64, stop <-chan struct{}) (bool, error) {
	if cr.hash == "" {
		return false, nil
	}
	if r := v.answered.Load(); r.covers(cr, after) {
		return r.answer(cr)
	}
	r := v.join(cr, after)
	select {
	case <-r.done:
		return r.answer(cr)
	case <-ctx.Done():
		return false, ctx.Err()
	case <-stop:
		return false, errRevoked
	}
}

// join returns the round whose answer on cr check takes: the last one
// answered or the one running, when it started once the clock had reached
// after and asked about cr; else the next one, which cr joins.
func (v *verifier) join(cr credential, after int64) *verifyRound {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctx.Err() != nil {
		// Shutting down: no more rounds; the stream ends unverified.
		r := &verifyRound{err: v.ctx.Err(), done: make(chan struct{})}
		close(r.done)
		return r
	}
	if r := v.answered.Load(); r.covers(cr, after) {
		return r
	}
	if v.current.covers(cr, after) {
		return v.current
	}
	return v.nextRoundLocked(cr)
}

// nextRoundLocked adds creds to the round being gathered, making it when
// there is none, and starts the round goroutine when it is not running.
// v.mu is held and v.ctx is alive.
func (v *verifier) nextRoundLocked(creds ...credential) *verifyRound {
	r := v.next
	if r == nil {
		r = &verifyRound{creds: map[credential]struct{}{}, done: make(chan struct{})}
		v.next = r
	}
	for _, cr := range creds {
		r.creds[cr] = struct{}{}
	}
	if !v.running {
		v.running = true
		v.wg.Add(1)
		go func() {
			defer v.wg.Done()
			v.loop()
		}()
	}
	return r
}

// loop runs rounds back to back while any stream waits, then ends.
func (v *verifier) loop() {
	for {
		v.mu.Lock()
		kicked := v.next != nil && v.next.users != nil
		v.mu.Unlock()
		if !kicked {
			v.gather()
		}
		v.mu.Lock()
		r := v.next
		v.next = nil
		if r == nil {
			v.running = false
			v.mu.Unlock()
			return
		}
		if v.waiting != nil {
			for _, cr := range v.waiting() {
				r.creds[cr] = struct{}{}
			}
		}
		if r.users != nil && v.ofUsers != nil {
			for _, cr := range v.ofUsers(r.users) {
				r.creds[cr] = struct{}{}
			}
		}
		// Everyone in r joined before this point, and every publish and
		// tick counted in r.start began before it: the query starts after
		// all of them.
		r.start = v.clock()
		v.current = r
		v.mu.Unlock()

		if len(r.creds) > 0 { // none: kicked for events no stream was waiting for
			v.query(r)
		}
		close(r.done)
		v.mu.Lock()
		v.current = nil
		v.answered.Store(r)
		v.mu.Unlock()
	}
}

// query asks the store which of r's credentials are live.
func (v *verifier) query(r *verifyRound) {
	var tokens, sessions []string
	for cr := range r.creds {
		if cr.session {
			sessions = append(sessions, cr.hash)
		} else {
			tokens = append(tokens, cr.hash)
		}
	}
	ctx, cancel := context.WithTimeout(v.ctx, verifyTimeout)
	r.tokens, r.sessions, r.err = v.store.LiveCredentials(ctx, tokens, sessions)
	cancel()
	if r.err != nil && v.ctx.Err() == nil {
		v.log.Warn("could not check the credentials of open event streams; ending them", "streams", len(r.creds), "err", r.err)
	}
	v.rounds.Add(1)
}

// gather lets the streams woken together (by one publish) join the next
// round before it starts: it yields while more of them keep joining, a
// few times at most.
func (v *verifier) gather() {
	last := -1
	for range 8 {
		v.mu.Lock()
		n := 0
		if v.next != nil {
			n = len(v.next.creds)
		}
		v.mu.Unlock()
		if n == last {
			return
		}
		last = n
		runtime.Gosched()
	}
}

// verify returns nil once the stream's credential was found live by a
// check that started once the clock had reached after (afterNow: after this
// call). A credential found revoked, expired or gone sets the
// stream's revoked flag and ends it (errRevoked); so does a check that could
// not be made (errUnverified): nothing is sent unverified.
func (st *streamer) verify(ctx context.Context, after int64) error {
	if st.revoked.Load() {
		return errRevoked
	}
	ok, err := st.s.verifier.check(ctx, st.cred, after, st.revokedC)
	if err != nil {
		return err
	}
	if !ok {
		st.revoked.Store(true)
		return errRevoked
	}
	return nil
}

// kick starts a round, at once, for the credentials of the open streams of
// the users whose events are published. The bus calls it once a publish
// that has subscribers has delivered its events (committed before): the
// round's goroutine, when kick starts it, is then the next to run on the
// publisher's processor, ahead of the streams the publish woke, so its
// query runs while they queue to run, and most of them find it answered
// when they ask (taking the answer without parking for it, and queueing to
// run a second time).
func (v *verifier) kick(events []*spec.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctx.Err() != nil {
		return // shutting down: no more rounds
	}
	r := v.nextRoundLocked()
	if r.users == nil {
		r.users = map[int64]bool{}
	}
	for _, e := range events {
		r.users[e.UserID] = true
	}
}

// joinAll puts every credential in creds into the next round (see join).
func (v *verifier) joinAll(creds []credential) {
	if len(creds) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ctx.Err() != nil {
		return // shutting down: no more rounds
	}
	v.nextRoundLocked(creds...)
}

// heartbeat is the server's one heartbeat: every stream re-checks its
// credential, and pings unless it just sent events, on the same tick. The tick itself puts every
// open stream's credential into the next round before it wakes the
// streams, so one query answers them all.
type heartbeat struct {
	wg      sync.WaitGroup // the ticker goroutine: it exits when ctx ends
	started bool           // guarded by mu
	mu      sync.Mutex
	ticks   atomic.Int64 // counted before onTick runs
}

// start starts the ticker unless it runs (or ctx has ended); it stops with
// ctx. onTick runs at each tick, after it is counted.
func (h *heartbeat) start(ctx context.Context, every time.Duration, onTick func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || ctx.Err() != nil {
		return
	}
	h.started = true
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.run(ctx, every, onTick)
	}()
}

// stop waits for the ticker to exit; ctx must be cancelled. Taking mu first
// means no start that saw ctx alive is still about to start it.
func (h *heartbeat) stop() {
	h.mu.Lock()
	//lint:ignore SA2001 a barrier: see above
	h.mu.Unlock()
	h.wg.Wait()
}

func (h *heartbeat) run(ctx context.Context, every time.Duration, onTick func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.ticks.Add(1)
			onTick()
		}
	}
}
