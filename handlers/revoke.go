package handlers

import (
	"context"
	"homework/engine/spec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
)

// credential is what authenticated a stream: an API token or a session,
// known by the hash of its secret (the form the store keeps), so no secret
// stays in memory for the stream's life. A stream lives only as long as its
// credential.
type credential struct {
	session bool   // a session cookie, else an API token (Bearer)
	hash    string // db.HashToken of the secret; "" when there was none
	userID  int64
}

// credentialOf copies the request's credential out of c, the same way
// authenticate picked it: the Authorization header when sent, else the
// session cookie.
func credentialOf(c *fiber.Ctx, userID int64) credential {
	cr := credential{userID: userID}
	if h := c.Get(fiber.HeaderAuthorization); h != "" {
		if _, tok, ok := strings.Cut(h, " "); ok && strings.TrimSpace(tok) != "" {
			cr.hash = spec.HashToken(strings.TrimSpace(tok))
		}
		return cr
	}
	if secret := c.Cookies(SessionCookie); secret != "" {
		cr.session, cr.hash = true, spec.HashToken(secret)
	}
	return cr
}

// streamRegistry knows the open streams, so that revoking a credential in
// this process ends its streams at once, before the revocation commits.
// A credential revoked elsewhere (`homework token revoke`, another server
// process on PostgreSQL) is caught by the streams' verifier: no stream sends
// an event before a check that started after the event was committed found
// its credential still live.
//
// It also owns the streams' connections, which fasthttp lets go of when a
// stream hijacks one: close ends them all at shutdown and waits for them.
type streamRegistry struct {
	mu      sync.Mutex
	streams map[*streamer]struct{}
	closed  bool          // the server is shutting down: no stream is added
	empty   chan struct{} // closed, once closed, when the last stream is removed
}

// add registers st, unless the registry is closed (it reports false).
func (r *streamRegistry) add(st *streamer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.streams == nil {
		r.streams = map[*streamer]struct{}{}
	}
	r.streams[st] = struct{}{}
	return true
}

func (r *streamRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.streams)
}

// remove forgets st, whose stream has ended and let its connection go.
func (r *streamRegistry) remove(st *streamer) {
	r.mu.Lock()
	delete(r.streams, st)
	if r.empty != nil && len(r.streams) == 0 {
		close(r.empty)
		r.empty = nil
	}
	r.mu.Unlock()
}

// close refuses new streams, cuts the writes of the open ones after
// streamCutGrace (they have been told to end by the server's context, but
// may be blocked writing to a client that does not read) and waits until
// every one has ended, or until ctx ends (it returns ctx's error).
func (r *streamRegistry) close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	cut := time.Now().Add(streamCutGrace)
	for st := range r.streams {
		if st.conn != nil {
			st.cut.stop(st.conn, cut)
		}
	}
	if len(r.streams) == 0 {
		r.mu.Unlock()
		return nil
	}
	empty := make(chan struct{})
	r.empty = empty
	r.mu.Unlock()
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// revoke ends every stream whose credential match accepts. A stream checks
// its revoked flag before every write, so nothing is sent after this
// returns.
func (r *streamRegistry) revoke(match func(credential) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for st := range r.streams {
		if match(st.cred) && st.revoked.CompareAndSwap(false, true) {
			close(st.revokedC)
			st.wake()
			n++
		}
	}
	return n
}

// wakeAll pokes every open stream.
func (r *streamRegistry) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for st := range r.streams {
		st.wake()
	}
}

// credentials returns the distinct credentials of the open streams that
// match accepts.
func (r *streamRegistry) credentials(match func(credential) bool) []credential {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[credential]bool{}
	var out []credential
	for st := range r.streams {
		if match(st.cred) && !seen[st.cred] {
			seen[st.cred] = true
			out = append(out, st.cred)
		}
	}
	return out
}

// waiting returns the distinct credentials of the streams that have live
// events waiting in their subscriptions: each is about to ask for a check.
func (r *streamRegistry) waiting() []credential {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []credential
	seen := map[credential]bool{}
	for st := range r.streams {
		if sub := st.sub.Load(); sub != nil && len(sub.C) > 0 && !seen[st.cred] {
			seen[st.cred] = true
			out = append(out, st.cred)
		}
	}
	return out
}

// tick is the heartbeat's: it puts the credentials of every open stream
// into the verifier's next round, then wakes every stream to ping and
// re-check.
func (s *Server) tick() {
	s.verifier.joinAll(s.streams.credentials(func(credential) bool { return true }))
	s.streams.wakeAll()
}

// endDeadTokenStreams ends, at once, the streams of the user's API tokens
// that no longer authenticate (one store query for all of them). A store
// error leaves them to the verifier, which checks before every send.
func (s *Server) endDeadTokenStreams(ctx context.Context, userID int64) {
	creds := s.streams.credentials(func(cr credential) bool { return cr.userID == userID && !cr.session && cr.hash != "" })
	if len(creds) == 0 {
		return
	}
	hashes := make([]string, len(creds))
	for i, cr := range creds {
		hashes[i] = cr.hash
	}
	live, _, err := s.db.LiveCredentials(ctx, hashes, nil)
	if err != nil {
		return
	}
	s.streams.revoke(func(cr credential) bool { return cr.userID == userID && !cr.session && !live[cr.hash] })
}

// revokedFlag is a stream's revocation state.
type revokedFlag = atomic.Bool
