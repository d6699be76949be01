package handlers

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"
)

// credential is what authenticated a stream: an API token or a session
// secret. A stream lives only as long as its credential.
type credential struct {
	token   string // API token secret (Bearer)
	session string // session cookie secret
	userID  int64
}

// credentialOf copies the request's credential out of c.
func credentialOf(c *fiber.Ctx, userID int64) credential {
	cr := credential{userID: userID}
	if h := c.Get(fiber.HeaderAuthorization); h != "" {
		if _, tok, ok := strings.Cut(h, " "); ok {
			cr.token = strings.Clone(strings.TrimSpace(tok))
		}
		return cr
	}
	cr.session = strings.Clone(c.Cookies(SessionCookie))
	return cr
}

// valid reports whether the credential still authenticates its user. Only
// a definite refusal (EUNAUTHORIZED, another user) is invalid: a database
// hiccup does not end a stream.
func (cr credential) valid(ctx context.Context, d Store) bool {
	var u *spec.User
	var err error
	switch {
	case cr.token != "":
		u, err = d.FindUserByToken(ctx, cr.token)
	case cr.session != "":
		_, u, err = d.FindSession(ctx, cr.session)
	default:
		return false
	}
	if err != nil {
		return spec.ErrorCode(err) != spec.EUNAUTHORIZED
	}
	return u.ID == cr.userID
}

// streamRegistry knows the open streams, so that revoking a credential in
// this process ends its streams at once, before the revocation commits.
// A credential revoked elsewhere (`homework token revoke`) is noticed at the
// stream's next heartbeat, when it re-authenticates.
type streamRegistry struct {
	mu      sync.Mutex
	streams map[*streamer]struct{}
}

func (r *streamRegistry) add(st *streamer) {
	r.mu.Lock()
	if r.streams == nil {
		r.streams = map[*streamer]struct{}{}
	}
	r.streams[st] = struct{}{}
	r.mu.Unlock()
}

func (r *streamRegistry) remove(st *streamer) {
	r.mu.Lock()
	delete(r.streams, st)
	r.mu.Unlock()
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
			n++
		}
	}
	return n
}

// revokedFlag is a stream's revocation state.
type revokedFlag = atomic.Bool
