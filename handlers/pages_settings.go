package handlers

import (
	"strconv"
	"strings"
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
}

// renderTokens renders the token page with the user's tokens.
func (s *Server) renderTokens(c *fiber.Ctx, status int, d views.TokensData) error {
	flash := d.Flash
	err := s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		toks, err := r.ListAPITokens(c.UserContext(), userOf(c).ID)
		d.Page, d.Tokens = s.pageFrom(c, r, "API tokens"), toks
		return err
	})
	if err != nil {
		return s.pageError(c, err)
	}
	d.Flash = flash
	return s.render(c, status, views.Tokens(d))
}

func (s *Server) tokensPage(c *fiber.Ctx) error {
	d := views.TokensData{}
	if c.Query("done") == "revoked" {
		d.Flash = "Token revoked. Requests with it are refused from now on."
	}
	return s.renderTokens(c, fiber.StatusOK, d)
}

// createToken creates a token and shows its secret on this response only:
// no redirect, so the secret never lands in a URL or the history, and the
// response is not cached.
func (s *Server) createToken(c *fiber.Ctx) error {
	name := strings.TrimSpace(c.FormValue("name"))
	switch {
	case name == "":
		return s.renderTokens(c, fiber.StatusUnprocessableEntity, views.TokensData{Error: "Give the token a name, to recognise it later."})
	case utf8.RuneCountInString(name) > 100 || !utf8.ValidString(name):
		return s.renderTokens(c, fiber.StatusUnprocessableEntity, views.TokensData{Error: "The name must be at most 100 characters."})
	}
	secret, _, err := s.db.CreateAPIToken(c.UserContext(), userOf(c).ID, name)
	if err != nil {
		return s.pageError(c, err)
	}
	return s.renderTokens(c, fiber.StatusCreated, views.TokensData{NewSecret: secret, NewName: name})
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
