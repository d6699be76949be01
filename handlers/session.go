package handlers

import (
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/limiter"
	"golang.org/x/crypto/bcrypt"

	"homework/views"
)

// Sign-in and first-account pages.
//
// CSRF: once signed in, every form carries the session's CSRF token in a
// hidden "csrf" field (htmx requests may send X-CSRF-Token instead), checked
// by requirePageUser on every POST. The login and setup forms have no session
// yet, so they use a double-submit cookie: the GET sets formCSRFCookie
// (random, HttpOnly, SameSite=Strict) and puts the same value in the form;
// the POST must carry both, equal. A cross-site page can neither read nor set
// that cookie, so it cannot forge the pair.

const (
	// formCSRFCookie holds the double-submit token of the pre-session forms.
	formCSRFCookie = "homework_form_csrf"
	// sessionTTL is how long a browser session lasts.
	sessionTTL = 30 * 24 * time.Hour
	// minPassword is the shortest password accepted at setup.
	minPassword = 8
	// loginAttempts failed sign-ins are allowed per IP and email per
	// loginWindow (the attempt after them is refused with 429).
	loginAttempts = 5
	loginWindow   = time.Minute
)

func (s *Server) sessionRoutes(app *fiber.App) {
	app.Get("/setup", s.setupForm)
	app.Post("/setup", s.setup)
	app.Get("/login", s.loginForm)
	// Failed sign-ins (any answer of 400 or more) count against the address
	// and email; a success does not.
	app.Post("/login", limiter.New(limiter.Config{
		Max:                    loginAttempts,
		Expiration:             loginWindow,
		SkipSuccessfulRequests: true,
		KeyGenerator: func(c *fiber.Ctx) string {
			return c.IP() + "|" + strings.ToLower(strings.TrimSpace(c.FormValue("email")))
		},
		LimitReached: func(c *fiber.Ctx) error {
			c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int(loginWindow.Seconds())))
			return s.renderLogin(c, fiber.StatusTooManyRequests, strings.TrimSpace(c.FormValue("email")), c.FormValue("next"),
				"Too many sign-in attempts for this account from your address. Wait a minute, then try again.")
		},
	}), s.login)
	app.Post("/logout", s.requirePageUser, s.logout)
}

// formToken returns the double-submit token, setting its cookie when the
// browser has none yet.
func (s *Server) formToken(c *fiber.Ctx) string {
	if t := c.Cookies(formCSRFCookie); len(t) >= 32 {
		return t
	}
	t := spec.NewSecret("")
	c.Cookie(&fiber.Cookie{Name: formCSRFCookie, Value: t, Path: "/", HTTPOnly: true,
		Secure: !s.opts.InsecureCookies, SameSite: fiber.CookieSameSiteStrictMode})
	return t
}

// formTokenOK reports whether the form's token matches its cookie.
func formTokenOK(c *fiber.Ctx) bool {
	return tokensEqual(c.FormValue("csrf"), c.Cookies(formCSRFCookie))
}

func (s *Server) setupForm(c *fiber.Ctx) error {
	n, err := s.db.CountUsers(c.UserContext())
	if err != nil {
		return err
	}
	if n > 0 {
		return c.Redirect("/login", fiber.StatusSeeOther)
	}
	return s.render(c, fiber.StatusOK, views.Setup(views.AuthData{Page: views.Page{Title: "Set up"}, FormCSRF: s.formToken(c),
		Notice: s.cookieNotice(c)}))
}

func (s *Server) setup(c *fiber.Ctx) error {
	ctx := c.UserContext()
	n, err := s.db.CountUsers(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		return c.Redirect("/login", fiber.StatusSeeOther)
	}
	email := strings.TrimSpace(c.FormValue("email"))
	d := views.AuthData{Page: views.Page{Title: "Set up"}, Email: email, Errors: map[string]string{}}
	if !formTokenOK(c) {
		d.Error = s.formRefused(c, "Please submit it again.")
		d.FormCSRF = s.formToken(c)
		return s.render(c, fiber.StatusForbidden, views.Setup(d))
	}
	d.FormCSRF = s.formToken(c)
	pw := c.FormValue("password")
	if a, err := mail.ParseAddress(email); err != nil || a.Address != email {
		d.Errors["email"] = "Enter an email address, such as ada@example.com."
	}
	if len(pw) < minPassword {
		d.Errors["password"] = "Use at least 8 characters."
	} else if len(pw) > 72 {
		d.Errors["password"] = "Use at most 72 characters."
	} else if pw != c.FormValue("password2") {
		d.Errors["password2"] = "The passwords do not match."
	}
	if len(d.Errors) > 0 {
		return s.render(c, fiber.StatusBadRequest, views.Setup(d))
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	u, err := s.db.CreateFirstUser(ctx, email, string(hash))
	if spec.ErrorCode(err) == spec.ECONFLICT {
		return c.Redirect("/login", fiber.StatusSeeOther)
	} else if err != nil {
		return err
	}
	if err := s.startSession(c, u); err != nil {
		return err
	}
	return c.Redirect("/runs/new", fiber.StatusSeeOther)
}

func (s *Server) loginForm(c *fiber.Ctx) error {
	ctx := c.UserContext()
	n, err := s.db.CountUsers(ctx)
	if err != nil {
		return err
	}
	if n == 0 {
		return c.Redirect("/setup", fiber.StatusSeeOther)
	}
	if secret := c.Cookies(SessionCookie); secret != "" {
		if _, _, err := s.db.FindSession(ctx, secret); err == nil {
			return c.Redirect(localPath(c.Query("next")), fiber.StatusSeeOther)
		}
	}
	return s.renderLogin(c, fiber.StatusOK, "", c.Query("next"), "")
}

func (s *Server) renderLogin(c *fiber.Ctx, status int, email, next, msg string) error {
	return s.render(c, status, views.Login(views.AuthData{Page: views.Page{Title: "Sign in"},
		Email: email, Next: localPath(next), FormCSRF: s.formToken(c), Error: msg, Notice: s.cookieNotice(c)}))
}

func (s *Server) login(c *fiber.Ctx) error {
	ctx := c.UserContext()
	email, next := strings.TrimSpace(c.FormValue("email")), c.FormValue("next")
	if !formTokenOK(c) {
		return s.renderLogin(c, fiber.StatusForbidden, email, next, s.formRefused(c, "Please sign in again."))
	}
	u, err := s.db.FindUserByEmail(ctx, email)
	if err != nil && spec.ErrorCode(err) != spec.ENOTFOUND {
		return err
	}
	hash := dummyHash() // equal work for unknown emails
	if u != nil {
		hash = []byte(u.PasswordHash)
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(c.FormValue("password"))) != nil || u == nil {
		return s.renderLogin(c, fiber.StatusUnauthorized, email, next, "Wrong email or password.")
	}
	if err := s.startSession(c, u); err != nil {
		return err
	}
	return c.Redirect(localPath(next), fiber.StatusSeeOther)
}

// dummyHash is compared against when the email is unknown, so that a wrong
// email takes as long as a wrong password.
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("not a password of anyone"), bcrypt.DefaultCost)
	return h
})

func (s *Server) logout(c *fiber.Ctx) error {
	secret := c.Cookies(SessionCookie)
	// The session's streams end before it is deleted: nothing written after
	// the logout reaches them.
	if secret != "" {
		hash := spec.HashToken(secret)
		s.streams.revoke(func(cr credential) bool { return cr.session && cr.hash == hash })
	}
	if err := s.db.DeleteSession(c.UserContext(), secret); err != nil {
		return err
	}
	c.Cookie(&fiber.Cookie{Name: SessionCookie, Value: "", Path: "/", HTTPOnly: true, Secure: !s.opts.InsecureCookies,
		SameSite: fiber.CookieSameSiteLaxMode, Expires: time.Unix(1, 0), MaxAge: -1})
	return c.Redirect("/login", fiber.StatusSeeOther)
}

// startSession creates a session for u and sets its cookie.
func (s *Server) startSession(c *fiber.Ctx, u *spec.User) error {
	secret, sess, err := s.db.CreateSession(c.UserContext(), u.ID, sessionTTL)
	if err != nil {
		return err
	}
	c.Cookie(&fiber.Cookie{Name: SessionCookie, Value: secret, Path: "/", HTTPOnly: true, Secure: !s.opts.InsecureCookies,
		SameSite: fiber.CookieSameSiteLaxMode, Expires: sess.ExpiresAt})
	return nil
}

// localPath returns p when it is a path on this site, else "/", so that
// ?next= cannot redirect elsewhere. Control characters are refused too:
// browsers drop tabs and line breaks from a URL, so "/\t/evil.example"
// would become "//evil.example".
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") ||
		strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "/"
	}
	return p
}

// requirePageUser signs in page requests from the session cookie, sending
// signed-out browsers to /login (or /setup when there is no account yet), and
// checks the session's CSRF token on every state-changing request.
func (s *Server) requirePageUser(c *fiber.Ctx) error {
	ctx := c.UserContext()
	var sess *spec.Session
	var u *spec.User
	var err error = spec.Errorf(spec.EUNAUTHORIZED, "Not signed in.")
	if secret := c.Cookies(SessionCookie); secret != "" {
		sess, u, err = s.db.FindSession(ctx, secret)
	}
	if err != nil {
		if spec.ErrorCode(err) != spec.EUNAUTHORIZED {
			return err
		}
		to := "/login"
		if n, err := s.db.CountUsers(ctx); err != nil {
			return err
		} else if n == 0 {
			to = "/setup"
		} else if safeMethod(c.Method()) && c.Get("HX-Request") == "" && c.Path() != "/" {
			to += "?next=" + url.QueryEscape(c.OriginalURL())
		}
		if c.Get("HX-Request") != "" {
			c.Set("HX-Redirect", to)
			return c.SendStatus(fiber.StatusUnauthorized)
		}
		return c.Redirect(to, fiber.StatusSeeOther)
	}
	c.Locals(localUser, u)
	c.Locals(localSession, sess)
	if !safeMethod(c.Method()) {
		tok := c.FormValue("csrf")
		if tok == "" {
			tok = c.Get("X-CSRF-Token")
		}
		if !tokensEqual(tok, sess.CSRFToken) {
			return s.renderError(c, fiber.StatusForbidden, "This form expired or did not come from this site (missing or wrong CSRF token). Go back, reload the page and try again.")
		}
	}
	return c.Next()
}
