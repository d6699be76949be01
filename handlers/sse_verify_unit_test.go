package handlers

import (
	"context"
	"homework/engine/spec"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// gatedStore answers LiveCredentials from the state when the query starts,
// then holds the answer until released: a query in flight cannot see a
// revocation that commits after it started.
type gatedStore struct {
	spec.Store
	mu      sync.Mutex
	revoked map[string]bool
	started chan []string // each query's token hashes, as it starts
	release chan struct{}
}

func (g *gatedStore) LiveCredentials(ctx context.Context, tokens, sessions []string) (map[string]bool, map[string]bool, error) {
	g.mu.Lock()
	live := map[string]bool{}
	for _, h := range tokens {
		if !g.revoked[h] {
			live[h] = true
		}
	}
	g.mu.Unlock()
	g.started <- tokens
	<-g.release
	return live, map[string]bool{}, nil
}

// TestAVerifierRoundUnderWayDoesNotAnswerALaterCheck: a check asked after a
// round's query started (afterNow, or a clock past the round's start) waits
// for the next round, and so sees a revocation the running round cannot; a
// check whose clock the running round covers shares it.
func TestAVerifierRoundUnderWayDoesNotAnswerALaterCheck(t *testing.T) {
	g := &gatedStore{revoked: map[string]bool{}, started: make(chan []string, 4), release: make(chan struct{})}
	var clock atomic.Int64
	v := &verifier{store: g, ctx: context.Background(), log: slog.New(slog.DiscardHandler), clock: clock.Load}
	cr := credential{hash: "h1", userID: 1}
	first := v.join(cr, afterNow)
	<-g.started // round 1 runs, started at clock 0, before the revocation
	if r := v.join(cr, 0); r != first {
		t.Fatal("a check the running round covers does not share it")
	}
	g.mu.Lock()
	g.revoked["h1"] = true // committed while round 1 is under way
	g.mu.Unlock()
	clock.Add(1) // and an event published after it
	later := v.join(cr, clock.Load())
	if later == first {
		t.Fatal("a check for an event published after round 1 started takes round 1's answer")
	}
	if fresh := v.join(cr, afterNow); fresh != later {
		t.Fatal("the checks waiting for the next round do not share it")
	}

	g.release <- struct{}{} // round 1 answers
	<-first.done
	if ok, err := first.answer(cr); !ok || err != nil {
		t.Fatalf("round 1: %v %v, want live", ok, err)
	}
	if r := v.join(cr, 0); r != first {
		t.Fatal("a check round 1 covers does not take its answer once it is in")
	}
	<-g.started // round 2, for the checks round 1 could not answer
	g.release <- struct{}{}
	<-later.done
	if ok, err := later.answer(cr); ok || err != nil {
		t.Fatalf("round 2: %v %v, want revoked", ok, err)
	}
	if ok, err := v.check(context.Background(), cr, clock.Load(), nil); ok || err != nil {
		t.Fatalf("check after round 2: %v %v, want revoked", ok, err)
	}
	if n := v.rounds.Load(); n != 2 {
		t.Fatalf("%d rounds, want 2", n)
	}
}

// TestAPublishKicksARoundForItsUsersStreams: a publish starts a round at
// once for the credentials of its events' users' streams (and no one
// else's); a check that round covers takes its answer, without a round of
// its own, once it is in, and a revocation that commits after the round
// started is seen by the next one only.
func TestAPublishKicksARoundForItsUsersStreams(t *testing.T) {
	g := &gatedStore{revoked: map[string]bool{}, started: make(chan []string, 4), release: make(chan struct{})}
	var clock atomic.Int64
	mine, other := credential{hash: "mine", userID: 1}, credential{hash: "other", userID: 2}
	v := &verifier{store: g, ctx: context.Background(), log: slog.New(slog.DiscardHandler), clock: clock.Load,
		ofUsers: func(users map[int64]bool) []credential {
			var out []credential
			for _, cr := range []credential{mine, other} {
				if users[cr.userID] {
					out = append(out, cr)
				}
			}
			return out
		}}
	clock.Add(1) // the publish begins
	v.kick([]*spec.Event{{UserID: 1}})
	if asked := <-g.started; len(asked) != 1 || asked[0] != "mine" {
		t.Fatalf("the kicked round asked about %v, want the publishing user's stream only", asked)
	}
	g.mu.Lock()
	g.revoked["mine"] = true // committed after the round started
	g.mu.Unlock()
	g.release <- struct{}{}
	for v.answered.Load() == nil {
		runtime.Gosched()
	}
	// A stream woken by the publish (its clock: 1) takes the answer.
	if ok, err := v.check(context.Background(), mine, clock.Load(), nil); !ok || err != nil {
		t.Fatalf("check covered by the kicked round: %v %v, want live", ok, err)
	}
	if n := v.rounds.Load(); n != 1 {
		t.Fatalf("%d rounds, want the kicked one only", n)
	}
	// A later event's check is not covered: the next round sees the
	// revocation.
	clock.Add(1)
	done := make(chan bool)
	go func() {
		ok, _ := v.check(context.Background(), mine, clock.Load(), nil)
		done <- ok
	}()
	<-g.started
	g.release <- struct{}{}
	if <-done {
		t.Fatal("a check after the revocation found the credential live")
	}
}
