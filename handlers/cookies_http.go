package handlers

import (
	"net"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// secureCookiesLost is the explanation shown when Secure cookies cannot
// work: browsers return them only over HTTPS (or to localhost).
const secureCookiesLost = "Your browser did not send back the sign-in cookie: this server marks its cookies Secure, " +
	"and browsers return Secure cookies only over HTTPS (or to localhost), but this page came over plain HTTP. " +
	"Open Homework through HTTPS (a TLS proxy in front of it), or, on a network you trust, start the server with " +
	"--insecure-cookies (HOMEWORK_INSECURE_COOKIES=1)."

// cookiesWillBeLost reports whether the browser will drop this server's
// cookies: Secure cookies on a plain-HTTP request to an address other than
// localhost.
func (s *Server) cookiesWillBeLost(c *fiber.Ctx) bool {
	if s.opts.InsecureCookies || c.Protocol() == "https" || strings.EqualFold(c.Get(fiber.HeaderXForwardedProto), "https") {
		return false
	}
	return !isLoopbackHost(c.Hostname())
}

// isLoopbackHost reports whether host (possibly with a port) is localhost
// or a loopback address, which browsers treat as secure.
func isLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cookieNotice is the sign-in and setup pages' warning, before the form is
// sent, when signing in cannot work over this connection.
func (s *Server) cookieNotice(c *fiber.Ctx) string {
	if s.cookiesWillBeLost(c) {
		return "Signing in will not work over this connection. " + secureCookiesLost
	}
	return ""
}

// formRefused says why a pre-session form's CSRF check failed: the cookie
// never came back over plain HTTP, the browser refuses cookies, or the form
// really is stale (again is what to do then).
func (s *Server) formRefused(c *fiber.Ctx, again string) string {
	if c.Cookies(formCSRFCookie) == "" {
		if s.cookiesWillBeLost(c) {
			return secureCookiesLost
		}
		return "Your browser did not send back this site's cookie, so the form could not be checked. Allow cookies for this site, reload the page and try again."
	}
	return "This form expired. " + again
}
