package handlers

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"

	"homework/views"
)

// tokenRoutes registers the API token settings page.
func (s *Server) tokenRoutes(app *fiber.App, auth fiber.Handler) {
	app.Get("/settings/tokens", auth, s.noStore, s.tokensPage)
	app.Post("/settings/tokens", auth, s.noStore, s.createToken)
	app.Post("/settings/tokens/:tid/revoke", auth, s.revokeToken)
	app.Post("/settings/webhooks", auth, s.noStore, s.createWebhook)
	app.Post("/settings/webhooks/:wid/test", auth, s.testWebhook)
	app.Post("/settings/webhooks/:wid/delete", auth, s.deleteWebhook)
}

// renderTokens renders the token page with the user's tokens.
func (s *Server) renderTokens(c *fiber.Ctx, status int, d views.TokensData) error {
	flash := d.Flash
	err := s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		ctx, uid := c.UserContext(), userOf(c).ID
		toks, err := r.ListAPITokens(ctx, uid)
		d.Page, d.Tokens = s.pageFrom(c, r, "API tokens"), toks
		if err != nil {
			return err
		}
		eps, err := r.ListWebhooks(ctx, uid)
		if err != nil {
			return err
		}
		d.Webhooks = nil
		for _, ep := range eps {
			ds, err := r.ListWebhookDeliveries(ctx, uid, ep.ID, 5)
			if err != nil {
				return err
			}
			d.Webhooks = append(d.Webhooks, views.WebhookRow{Endpoint: ep, Deliveries: ds})
		}
		return nil
	})
	if err != nil {
		return s.pageError(c, err)
	}
	d.Flash = flash
	return s.render(c, status, views.Tokens(d))
}

func (s *Server) tokensPage(c *fiber.Ctx) error {
	d := views.TokensData{}
	switch c.Query("done") {
	case "revoked":
		d.Flash = "Token revoked. Requests with it are refused from now on."
	case "webhook-deleted":
		d.WebhookFlash = "Webhook deleted."
	case "webhook-tested":
		d.WebhookFlash = "A test ping is on its way; its delivery is listed below."
	case "created":
		d.NewSecret, d.NewName = s.takeNewToken(c)
		if d.NewSecret == "" {
			d.Flash = "The new token was shown once and is not shown again: if you did not copy it, revoke it and create another."
		}
	}
	return s.renderTokens(c, fiber.StatusOK, d)
}

// newTokenCookie carries a token just created from the create's POST to
// the page its redirect loads, which shows it once and clears the cookie:
// the secret never lands in a URL or the history, and reloading that page
// neither creates another token nor shows the secret again. The cookie is
// HttpOnly, SameSite=Strict, only sent to the tokens page, lives a few
// minutes at most, and is bound to the session that created the token.
const newTokenCookie = "homework_new_token"

// newTokenMAC binds a token's id and secret to the session's CSRF token
// (a secret of the session only the server and that session's pages know).
func newTokenMAC(sess *spec.Session, id, secret string) string {
	return spec.HashToken(sess.CSRFToken + "|" + id + "|" + secret)[:32]
}

// takeNewToken returns the secret and name of the token this session just
// created, once: the cookie is cleared in any case. It returns "" when
// there is none, it is another session's, or the token is gone.
func (s *Server) takeNewToken(c *fiber.Ctx) (secret, name string) {
	v := c.Cookies(newTokenCookie)
	if v == "" {
		return "", ""
	}
	c.Cookie(&fiber.Cookie{Name: newTokenCookie, Value: "", Path: "/settings/tokens", HTTPOnly: true,
		Secure: !s.opts.InsecureCookies, SameSite: fiber.CookieSameSiteStrictMode, Expires: time.Unix(1, 0), MaxAge: -1})
	sess := sessionOf(c)
	parts := strings.Split(v, ".")
	if sess == nil || len(parts) != 3 || !tokensEqual(parts[2], newTokenMAC(sess, parts[0], parts[1])) {
		return "", ""
	}
	id, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return "", ""
	}
	toks, err := s.db.ListAPITokens(c.UserContext(), userOf(c).ID)
	if err != nil {
		return "", ""
	}
	for _, t := range toks {
		if t.ID == id && t.RevokedAt.IsZero() {
			return parts[1], t.Name
		}
	}
	return "", ""
}

// createToken creates a token and redirects (303) to the tokens page,
// which shows its secret once (newTokenCookie): reloading that page
// creates nothing.
func (s *Server) createToken(c *fiber.Ctx) error {
	name := strings.TrimSpace(c.FormValue("name"))
	switch {
	case name == "":
		return s.renderTokens(c, fiber.StatusUnprocessableEntity, views.TokensData{Error: "Give the token a name, to recognise it later."})
	case utf8.RuneCountInString(name) > 100 || !utf8.ValidString(name):
		return s.renderTokens(c, fiber.StatusUnprocessableEntity, views.TokensData{Error: "The name must be at most 100 characters."})
	}
	secret, tok, err := s.db.CreateAPIToken(c.UserContext(), userOf(c).ID, name)
	if err != nil {
		return s.pageError(c, err)
	}
	id := strconv.FormatInt(tok.ID, 10)
	c.Cookie(&fiber.Cookie{Name: newTokenCookie, Value: id + "." + secret + "." + newTokenMAC(sessionOf(c), id, secret),
		Path: "/settings/tokens", HTTPOnly: true, Secure: !s.opts.InsecureCookies, SameSite: fiber.CookieSameSiteStrictMode,
		MaxAge: 300})
	return c.Redirect("/settings/tokens?done=created", fiber.StatusSeeOther)
}

func (s *Server) revokeToken(c *fiber.Ctx) error {
	id, err := strconv.ParseInt(c.Params("tid"), 10, 64)
	if err != nil || id <= 0 {
		return s.renderError(c, fiber.StatusNotFound, "Token not found.")
	}
	// RevokeAPIToken matches the user too: another person's token is not found.
	if err := s.db.RevokeAPIToken(c.UserContext(), userOf(c).ID, id); err != nil {
		if spec.ErrorCode(err) == spec.ENOTFOUND {
			return s.renderError(c, fiber.StatusNotFound, "Token not found (or already revoked).")
		}
		return s.pageError(c, err)
	}
	// The revoked token's open streams end now: a token stream of this user
	// whose secret no longer authenticates. (Anything committed after the
	// revocation could not reach them anyway: the verifier checks first.)
	s.endDeadTokenStreams(c.UserContext(), userOf(c).ID)
	return c.Redirect("/settings/tokens?done=revoked", fiber.StatusSeeOther)
}

// createWebhook creates a webhook endpoint and renders the page with its
// secret, shown this once (the page is the POST's answer: the secret never
// lands in a URL).
func (s *Server) createWebhook(c *fiber.Ctx) error {
	form, err := c.MultipartForm()
	var events []string
	if err == nil {
		events = form.Value["events"]
	} else {
		c.Request().PostArgs().VisitAll(func(k, v []byte) {
			if string(k) == "events" {
				events = append(events, string(v))
			}
		})
	}
	if len(events) == 0 {
		return s.renderTokens(c, fiber.StatusUnprocessableEntity, views.TokensData{WebhookError: "Choose at least one event."})
	}
	ep, err := s.engine.CreateWebhook(c.UserContext(), userOf(c).ID, strings.TrimSpace(c.FormValue("url")), events, c.FormValue("format"))
	if err != nil {
		if spec.ErrorCode(err) == spec.EINVALID {
			return s.renderTokens(c, fiber.StatusUnprocessableEntity, views.TokensData{WebhookError: spec.ErrorMessage(err)})
		}
		return s.pageError(c, err)
	}
	return s.renderTokens(c, fiber.StatusOK, views.TokensData{NewWebhook: ep})
}

func (s *Server) testWebhook(c *fiber.Ctx) error {
	id, err := strconv.ParseInt(c.Params("wid"), 10, 64)
	if err != nil || id <= 0 {
		return s.renderError(c, fiber.StatusNotFound, "Webhook not found.")
	}
	if _, err := s.engine.TestWebhook(c.UserContext(), userOf(c).ID, id); err != nil {
		if spec.ErrorCode(err) == spec.ENOTFOUND {
			return s.renderError(c, fiber.StatusNotFound, "Webhook not found.")
		}
		return s.pageError(c, err)
	}
	return c.Redirect("/settings/tokens?done=webhook-tested#webhooks", fiber.StatusSeeOther)
}

func (s *Server) deleteWebhook(c *fiber.Ctx) error {
	id, err := strconv.ParseInt(c.Params("wid"), 10, 64)
	if err != nil || id <= 0 {
		return s.renderError(c, fiber.StatusNotFound, "Webhook not found.")
	}
	// DeleteWebhook matches the user too: another person's endpoint is not found.
	if err := s.db.DeleteWebhook(c.UserContext(), userOf(c).ID, id); err != nil {
		if spec.ErrorCode(err) == spec.ENOTFOUND {
			return s.renderError(c, fiber.StatusNotFound, "Webhook not found.")
		}
		return s.pageError(c, err)
	}
	return c.Redirect("/settings/tokens?done=webhook-deleted#webhooks", fiber.StatusSeeOther)
}
