package handlers

import (
	"crypto/subtle"
	"strings"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"
)

// SessionCookie is the name of the browser session cookie.
const SessionCookie = "homework_session"

const (
	localUser    = "user"
	localSession = "session"
)

func userOf(c *fiber.Ctx) *spec.User {
	u, _ := c.Locals(localUser).(*spec.User)
	return u
}

func sessionOf(c *fiber.Ctx) *spec.Session {
	s, _ := c.Locals(localSession).(*spec.Session)
	return s
}

// authenticate finds the caller from a Bearer token or the session cookie.
// It returns EUNAUTHORIZED when neither identifies a user.
func (s *Server) authenticate(c *fiber.Ctx) error {
	if h := c.Get(fiber.HeaderAuthorization); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return spec.Errorf(spec.EUNAUTHORIZED, "The Authorization header must be \"Bearer <token>\".")
		}
		u, err := s.db.FindUserByToken(c.UserContext(), strings.TrimSpace(token))
		if err != nil {
			return err
		}
		c.Locals(localUser, u)
		return nil
	}
	if secret := c.Cookies(SessionCookie); secret != "" {
		sess, u, err := s.db.FindSession(c.UserContext(), secret)
		if err != nil {
			return err
		}
		c.Locals(localUser, u)
		c.Locals(localSession, sess)
		return nil
	}
	return spec.Errorf(spec.EUNAUTHORIZED, "Authentication required: send \"Authorization: Bearer <token>\" (create one with `homework token create`).")
}

// requireAPIUser authenticates API requests. A request authenticated by the
// session cookie that changes state must carry the session's CSRF token in
// X-CSRF-Token.
func (s *Server) requireAPIUser(c *fiber.Ctx) error {
	if err := s.authenticate(c); err != nil {
		return s.jsonError(c, err)
	}
	if sess := sessionOf(c); sess != nil && !safeMethod(c.Method()) {
		if !tokensEqual(c.Get("X-CSRF-Token"), sess.CSRFToken) {
			return s.jsonError(c, spec.Errorf(spec.EFORBIDDEN, "Missing or wrong CSRF token (send X-CSRF-Token)."))
		}
	}
	return c.Next()
}

func safeMethod(m string) bool {
	return m == fiber.MethodGet || m == fiber.MethodHead || m == fiber.MethodOptions
}

func tokensEqual(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
