package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

// startMain starts the whole server on 127.0.0.1:0 with a database under
// t.TempDir() and returns it with its base URL.
func startMain(t *testing.T, mod func(*Config)) (*Main, string) {
	t.Helper()
	cfg, err := parseServeConfig([]string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "h.db"), "--script-executor", "--insecure-cookies"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(cfg)
	}
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, "http://" + m.Addr()
}

func TestRunExitCodes(t *testing.T) {
	env := func(string) string { return "" }
	cases := []struct {
		name string
		args []string
		env  func(string) string
		code int
		want string
	}{
		{"an unknown flag is a usage error", []string{"serve", "--nope"}, env, 2, "flag provided but not defined"},
		{"a bad workers value is a usage error", []string{"--workers", "zero"}, env, 2, "workers"},
		{"workers out of range is a usage error", []string{"--workers", "0"}, env, 2, "--workers must be from 1 to 256"},
		{"a bad environment value is a usage error", []string{"serve"}, func(k string) string {
			if k == "HOMEWORK_WORKERS" {
				return "many"
			}
			return ""
		}, 2, "HOMEWORK_WORKERS"},
		{"a bad base URL is a usage error", []string{"--llm-base-url", "localhost:11434"}, env, 2, "--llm-base-url"},
		{"an unknown command is a usage error", []string{"frobnicate"}, env, 2, "unknown command"},
		{"version prints the version", []string{"version"}, env, 0, "homework dev"},
		{"user add without an email is a usage error", []string{"user", "add"}, env, 2, "--email"},
		{"token create without an email is a usage error", []string{"token", "create"}, env, 2, "--email"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), c.args, c.env, strings.NewReader(""), &out, &errb)
			if code != c.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, c.code, errb.String())
			}
			text := out.String() + errb.String()
			if !strings.Contains(text, c.want) {
				t.Fatalf("output %q does not mention %q", text, c.want)
			}
			if c.code == 2 && strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
				t.Fatalf("a usage error must be one line, got %q", errb.String())
			}
		})
	}
}

func TestFlagsWinOverEnvironment(t *testing.T) {
	env := map[string]string{"HOMEWORK_ADDR": "127.0.0.1:9999", "HOMEWORK_DB": "/tmp/env.db", "HOMEWORK_WORKERS": "7",
		"OPENAI_BASE_URL": "http://fallback/v1", "OPENAI_API_KEY": "k1", "HOMEWORK_LLM_API_KEY": "k2", "HOMEWORK_LLM_MODEL": "m"}
	cfg, err := parseServeConfig([]string{"--workers", "3"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:9999" || cfg.DBPath != "/tmp/env.db" || cfg.Workers != 3 || cfg.LLMBaseURL != "http://fallback/v1" ||
		cfg.LLMAPIKey != "k2" || cfg.LLMModel != "m" {
		t.Fatalf("config %+v", cfg)
	}
	cfg, err = parseServeConfig(nil, func(string) string { return "" })
	if err != nil || cfg.Addr != "127.0.0.1:8080" || cfg.DBPath != "./homework.db" || cfg.Workers != 4 {
		t.Fatalf("defaults %+v %v", cfg, err)
	}
}

func TestUserAndTokenCommandsAndBearerAuth(t *testing.T) {
	m, base := startMain(t, nil)
	env := func(k string) string {
		if k == "HOMEWORK_DB" {
			return m.Config.DBPath
		}
		return ""
	}
	var out, errb bytes.Buffer
	// The short-lived commands work while the server holds the database.
	if code := run(context.Background(), []string{"user", "add", "--email", "ann@example.com", "--admin"}, env, strings.NewReader("correct horse battery\n"), &out, &errb); code != 0 {
		t.Fatalf("user add: %d %s", code, errb.String())
	}
	if code := run(context.Background(), []string{"user", "add", "--email", "bob@example.com"}, env, strings.NewReader("short\n"), &out, &errb); code != 2 {
		t.Fatalf("a short password must be refused: %d", code)
	}
	out.Reset()
	if code := run(context.Background(), []string{"token", "create", "--email", "ann@example.com", "--name", "ci"}, env, nil, &out, &errb); code != 0 {
		t.Fatalf("token create: %d %s", code, errb.String())
	}
	token := strings.TrimSpace(out.String())
	if !strings.HasPrefix(token, "hw_") {
		t.Fatalf("token %q", token)
	}
	u, _ := m.Store.FindUserByEmail(context.Background(), "ann@example.com")
	if u == nil || !u.IsAdmin || strings.Contains(u.PasswordHash, "horse") {
		t.Fatalf("user %+v", u)
	}

	get := func(auth string) (int, string) {
		req, _ := http.NewRequest("GET", base+"/api/runs", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("Bearer " + token); code != 200 {
		t.Fatalf("good token: %d", code)
	}
	for name, auth := range map[string]string{"missing": "", "wrong": "Bearer hw_nope", "malformed": "Basic abc"} {
		code, body := get(auth)
		var e struct {
			Error struct{ Code, Message string }
		}
		if code != 401 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "unauthorized" || e.Error.Message == "" {
			t.Fatalf("%s token: %d %s", name, code, body)
		}
	}
	// Revoked with the command line, while the server runs.
	out.Reset()
	if code := run(context.Background(), []string{"token", "list", "--email", "ann@example.com"}, env, nil, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), `"ci"`) || !strings.Contains(out.String(), "active") || strings.Contains(out.String(), token) {
		t.Fatalf("token list: %d %q", code, out.String())
	}
	id := strings.Fields(out.String())[0]
	if code := run(context.Background(), []string{"token", "revoke", "--email", "ann@example.com", "--id", "999"}, env, nil, &out, &errb); code != 1 {
		t.Fatalf("revoking an unknown token: %d", code)
	}
	if code := run(context.Background(), []string{"token", "revoke", "--email", "ann@example.com", "--id", id}, env, nil, &out, &errb); code != 0 {
		t.Fatalf("token revoke: %d %s", code, errb.String())
	}
	if code, _ := get("Bearer " + token); code != 401 {
		t.Fatalf("revoked token: %d", code)
	}
	out.Reset()
	run(context.Background(), []string{"token", "list", "--email", "ann@example.com"}, env, nil, &out, &errb)
	if !strings.Contains(out.String(), "revoked") {
		t.Fatalf("token list after revoke: %q", out.String())
	}
}

func TestHealthzAndLayoutPage(t *testing.T) {
	_, base := startMain(t, nil)
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"status":"ok"}` {
		t.Fatalf("healthz %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(b), `href="/static/css/app.css"`) {
		t.Fatalf("layout page: %s %s", resp.Header.Get("Content-Type"), b)
	}
	resp, err = http.Get(base + "/static/css/app.css")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") || len(b) < 1000 {
		t.Fatalf("stylesheet %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestASecondServerOnTheSameDatabaseRefusesToStart(t *testing.T) {
	m, _ := startMain(t, nil)
	cfg := *m.Config
	cfg.Addr = "127.0.0.1:0"
	second := NewMain(&cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := second.Run(context.Background())
	second.Close()
	if err == nil || !strings.Contains(err.Error(), "another `homework serve`") {
		t.Fatalf("second server: %v", err)
	}
	// The first still answers.
	if err := m.Store.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestShutdownReturnsWithinItsBoundWhileARequestIsInFlight(t *testing.T) {
	m, base := startMain(t, func(c *Config) { c.ShutdownTimeout = 4 * time.Second })
	secret, _, err := func() (string, *spec.APIToken, error) {
		u, err := m.Store.CreateUser(context.Background(), "a@example.com", "x", false)
		if err != nil {
			return "", nil, err
		}
		return m.Store.CreateAPIToken(context.Background(), u.ID, "")
	}()
	if err != nil {
		t.Fatal(err)
	}
	// An open event stream is a request that never finishes by itself.
	req, _ := http.NewRequest("GET", base+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream status %d", resp.StatusCode)
	}
	// Shutdown gives the HTTP server half its bound; it reports a deadline
	// error if the open stream held it up. The stream must end, too.
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return")
	}
	if _, err := io.ReadAll(resp.Body); err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Logf("stream ended with %v", err)
	}
}

func TestMigrateCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "h.db")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "--db", path}, func(string) string { return "" }, nil, &out, &errb); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb.String())
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if code := run(context.Background(), []string{"migrate", "--db", path}, func(string) string { return "" }, nil, &out, &errb); code != 0 {
		t.Fatalf("migrate twice: %d %s", code, errb.String())
	}
	fmt.Fprint(io.Discard, out.String())
}

// waitWithin calls wait and fails the test when it has not returned within
// d, so no cleanup can hang the test binary.
func waitWithin(t testing.TB, what string, d time.Duration, wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("waiting for %s: not done after %v", what, d)
	}
}
