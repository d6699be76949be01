package handlers

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func TestSignInOverPlainHTTPExplainsTheSecureCookie(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.InsecureCookies = false })
	hash, _ := bcrypt.GenerateFromPassword([]byte(pagePassword), bcrypt.MinCost)
	if _, err := ts.DB.CreateUser(ts.ctx, "ada@example.com", string(hash), true); err != nil {
		t.Fatal(err)
	}
	send := func(method, host, path string, form url.Values, header ...string) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, ts.URL+path, body)
		req.Host = host
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	form := url.Values{"email": {"ada@example.com"}, "password": {pagePassword}, "csrf": {strings.Repeat("x", 43)}}

	t.Run("on a LAN address the sign-in page warns before the form is sent", func(t *testing.T) {
		code, body := send("GET", "192.168.1.20:8080", "/login", nil)
		if code != 200 {
			t.Fatalf("status %d", code)
		}
		expectContains(t, body, `id="form-notice"`, "Signing in will not work over this connection", "--insecure-cookies", "HTTPS")
	})
	t.Run("the refused form says the cookie never came back, not that it expired", func(t *testing.T) {
		code, body := send("POST", "192.168.1.20:8080", "/login", form)
		if code != http.StatusForbidden {
			t.Fatalf("status %d", code)
		}
		expectContains(t, body, "did not send back the sign-in cookie", "plain HTTP", "--insecure-cookies")
		expectLacks(t, body, "expired")
	})
	t.Run("localhost and HTTPS behind a proxy are fine", func(t *testing.T) {
		for _, h := range []struct{ host, proto string }{{"localhost:8080", ""}, {"127.0.0.1:8080", ""}, {"[::1]:8080", ""}, {"homework.example.com", "https"}} {
			_, body := send("GET", h.host, "/login", nil, "X-Forwarded-Proto", h.proto)
			expectLacks(t, body, `id="form-notice"`)
			_, body = send("POST", h.host, "/login", form, "X-Forwarded-Proto", h.proto)
			expectLacks(t, body, "plain HTTP")
		}
	})
	t.Run("a stale form with its cookie still says it expired", func(t *testing.T) {
		stale := url.Values{"email": {"bob@example.com"}, "password": {pagePassword}, "csrf": {strings.Repeat("x", 43)}}
		_, body := send("POST", "localhost", "/login", stale, "Cookie", formCSRFCookie+"="+strings.Repeat("y", 43))
		expectContains(t, body, "This form expired")
	})
}
