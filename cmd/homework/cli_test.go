package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"homework/db"

	"golang.org/x/crypto/bcrypt"
)

func noEnv(string) string { return "" }

// runCLI runs a command line and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, env func(string) string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, env, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errs := runCLI(t, noEnv, "", args...)
		if code != 0 || errs != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		for _, c := range commandList {
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), c.name+" ") {
					line = l
				}
			}
			if line == "" || !strings.Contains(line, c.summary) {
				t.Fatalf("%v does not list %q with its summary:\n%s", args, c.name, out)
			}
		}
	}
}

func TestCommandHelpShowsFlagsWithTheirEnvironment(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--help"}, []string{"-addr", "HOMEWORK_ADDR", "-db", "HOMEWORK_DB", "-insecure-cookies", "HOMEWORK_INSECURE_COOKIES",
			"-log-format", "HOMEWORK_LOG_FORMAT", "-prices", "HOMEWORK_PRICES", "-mcp-config", "HOMEWORK_MCP_CONFIG", "-shutdown-timeout", "HOMEWORK_SHUTDOWN_TIMEOUT"}},
		{[]string{"--addr", ":1", "--help"}, []string{"usage: homework serve"}},
		{[]string{"user", "add", "--help"}, []string{"usage: homework user add", "-email", "-admin", "HOMEWORK_DB", "stdin"}},
		{[]string{"user", "passwd", "-h"}, []string{"usage: homework user passwd", "-email"}},
		{[]string{"user", "list", "--help"}, []string{"usage: homework user list", "HOMEWORK_DB"}},
		{[]string{"token", "revoke", "--help"}, []string{"-id", "-email"}},
		{[]string{"user", "--help"}, []string{"add", "list", "passwd"}},
		{[]string{"token", "--help"}, []string{"create", "list", "revoke"}},
		{[]string{"tail", "--help"}, []string{"HOMEWORK_SERVER", "HOMEWORK_TOKEN"}},
		{[]string{"help", "migrate"}, []string{"usage: homework migrate", "HOMEWORK_DB"}},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, noEnv, "", c.args...)
		if code != 0 || errs != "" {
			t.Fatalf("%v: exit %d, stderr %q", c.args, code, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Fatalf("%v: help does not mention %q:\n%s", c.args, w, out)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	t.Run("the flag and the command print the same version", func(t *testing.T) {
		_, a, _ := runCLI(t, noEnv, "", "--version")
		_, b, _ := runCLI(t, noEnv, "", "version")
		if a != b || !strings.HasPrefix(a, "homework ") || strings.TrimSpace(a) == "homework" {
			t.Fatalf("--version %q, version %q", a, b)
		}
	})
	t.Run("a version set at build time wins", func(t *testing.T) {
		old := version
		version = "v1.2.3"
		t.Cleanup(func() { version = old })
		if _, out, _ := runCLI(t, noEnv, "", "version"); out != "homework v1.2.3\n" {
			t.Fatalf("got %q", out)
		}
	})
	t.Run("without one, the build information says which code it is", func(t *testing.T) {
		cases := []struct {
			bi   debug.BuildInfo
			want string
		}{
			{debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "v0.4.0"},
			{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "86aa708c0ffee1234567890abcdef"}, {Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
				"86aa708c0ffe+dirty (2026-11-23T10:00:00Z)"},
			{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		}
		for _, c := range cases {
			if got := versionFromBuildInfo(&c.bi); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		}
	})
}

func TestBadServeValuesAreOneLineBeforeAnythingStarts(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(broken, []byte(`{"m": {"input": "cheap"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	badMCP := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(badMCP, []byte(`{"mcpServers": {"github": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(dir, "never.db")
	envWith := func(k, v string) func(string) string {
		return func(key string) string {
			if key == k {
				return v
			}
			return ""
		}
	}
	cases := []struct {
		name string
		env  func(string) string
		args []string
		want string
	}{
		{"an address without a port", noEnv, []string{"--addr", "nonsense"}, "--addr"},
		{"an address with a bad port", noEnv, []string{"--addr", "127.0.0.1:http99"}, "port"},
		{"a port out of range", noEnv, []string{"--addr", ":70000"}, "port"},
		{"a missing price file", noEnv, []string{"--prices", filepath.Join(dir, "nope.json")}, "--prices"},
		{"a broken price file", noEnv, []string{"--prices", broken}, "--prices"},
		{"a broken price file from the environment", envWith("HOMEWORK_PRICES", broken), nil, "--prices"},
		{"a missing MCP config", noEnv, []string{"--mcp-config", filepath.Join(dir, "nope.json")}, "--mcp-config"},
		{"an MCP config naming an unset variable names the path and the field", noEnv, []string{"--mcp-config", badMCP}, badMCP + ": mcpServers.github.headers.Authorization: ${GITHUB_TOKEN} is not set"},
		{"a bad MCP config from the environment", envWith("HOMEWORK_MCP_CONFIG", badMCP), nil, "mcpServers.github.headers"},
		{"a bad log format", noEnv, []string{"--log-format", "xml"}, "--log-format"},
		{"a bad log level", noEnv, []string{"--log-level", "loud"}, "--log-level"},
		{"a bad boolean in the environment", envWith("HOMEWORK_INSECURE_COOKIES", "maybe"), nil, "HOMEWORK_INSECURE_COOKIES"},
		{"a bad duration in the environment", envWith("HOMEWORK_SHUTDOWN_TIMEOUT", "soon"), nil, "HOMEWORK_SHUTDOWN_TIMEOUT"},
		{"a bad address in the environment", envWith("HOMEWORK_ADDR", "localhost"), nil, "--addr"},
		{"a lease too short", noEnv, []string{"--lease-ttl", "10ms"}, "--lease-ttl"},
		{"a stray argument", noEnv, []string{"serve", "now"}, "unexpected argument"},
		{"an unknown subcommand", noEnv, []string{"user", "delete"}, "user add|list|passwd"},
		{"tail without a run", noEnv, []string{"tail", "--token", "x"}, "missing RUN_ID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--db", dbPath}, c.args...)
			if len(c.args) > 0 && !strings.HasPrefix(c.args[0], "-") {
				args = c.args
			}
			code, out, errs := runCLI(t, c.env, "", args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stdout %q stderr %q)", code, out, errs)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "homework: ") || !strings.Contains(errs, c.want) {
				t.Fatalf("want one line mentioning %q, got %q", c.want, errs)
			}
			if _, err := os.Stat(dbPath); !os.IsNotExist(err) {
				t.Fatalf("the database was opened before the bad value was reported: %v", err)
			}
		})
	}
}

func TestGoodServeValues(t *testing.T) {
	prices := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(prices, []byte(`{"my-model": {"input": 0.5, "output": 1.5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseServeConfig([]string{"--addr", "[::1]:0", "--prices", prices, "--log-format", "json", "--log-level", "debug"},
		func(k string) string {
			if k == "HOMEWORK_INSECURE_COOKIES" {
				return "true"
			}
			return ""
		})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.InsecureCookies || cfg.LogFormat != "json" || cfg.LogLevel.String() != "DEBUG" {
		t.Fatalf("config %+v", cfg)
	}
	if p, ok := cfg.Prices["my-model"]; !ok || p.Output != 1.5 {
		t.Fatalf("prices %+v", cfg.Prices)
	}
}

func TestUserListAndPasswd(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "h.db")
	env := func(k string) string {
		if k == "HOMEWORK_DB" {
			return dbPath
		}
		return ""
	}
	if code, out, _ := runCLI(t, env, "", "user", "list"); code != 0 || !strings.Contains(out, "no accounts yet") {
		t.Fatalf("empty list: %d %q", code, out)
	}
	if code, _, errs := runCLI(t, env, "first password\n", "user", "add", "--email", "ann@example.com", "--admin"); code != 0 {
		t.Fatalf("user add: %s", errs)
	}
	if code, _, errs := runCLI(t, env, "another password\n", "user", "add", "--email", "bob@example.com"); code != 0 {
		t.Fatalf("user add: %s", errs)
	}
	code, out, _ := runCLI(t, env, "", "user", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "ann@example.com\tadmin") || !strings.Contains(lines[1], "bob@example.com\tuser") {
		t.Fatalf("user list: %d %q", code, out)
	}
	if strings.Contains(out, "$2") {
		t.Fatalf("user list shows a password hash: %q", out)
	}

	d, err := db.Open(context.Background(), db.Options{Path: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := d.FindUserByEmail(context.Background(), "bob@example.com")
	secret, _, err := d.CreateSession(context.Background(), u.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	oldHash := u.PasswordHash
	d.Close()

	if code, _, errs := runCLI(t, env, "short\n", "user", "passwd", "--email", "bob@example.com"); code != 2 || !strings.Contains(errs, "at least") {
		t.Fatalf("a short password: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, env, "a brand new password\n", "user", "passwd", "--email", "nobody@example.com"); code != 1 || !strings.Contains(errs, "no user") {
		t.Fatalf("an unknown user: %d %q", code, errs)
	}
	if code, out, errs := runCLI(t, env, "a brand new password\n", "user", "passwd", "--email", "bob@example.com"); code != 0 || !strings.Contains(out, "bob@example.com") {
		t.Fatalf("user passwd: %d %q %q", code, out, errs)
	}
	d, err = db.Open(context.Background(), db.Options{Path: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	u, _ = d.FindUserByEmail(context.Background(), "bob@example.com")
	if u.PasswordHash == oldHash || checkPassword(u.PasswordHash, "a brand new password") != nil {
		t.Fatal("the password did not change")
	}
	if _, _, err := d.FindSession(context.Background(), secret); err == nil {
		t.Fatal("the old session still works after the password change")
	}
}

// checkPassword reports whether pw matches hash.
func checkPassword(hash, pw string) error {
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw))
}

func TestCookieWarningOnANetworkAddress(t *testing.T) {
	cases := []struct {
		addr     string
		insecure bool
		warn     bool
	}{
		{"127.0.0.1:8080", false, false},
		{"localhost:8080", false, false},
		{"[::1]:8080", false, false},
		{"0.0.0.0:8080", false, true},
		{":8080", false, true},
		{"192.168.1.5:8080", false, true},
		{"0.0.0.0:8080", true, false},
	}
	for _, c := range cases {
		msg := cookieWarning(&Config{Addr: c.addr, InsecureCookies: c.insecure})
		if (msg != "") != c.warn {
			t.Fatalf("%s insecure=%v: warning %q", c.addr, c.insecure, msg)
		}
		if c.warn && (!strings.Contains(msg, "--insecure-cookies") || !strings.Contains(msg, "TLS")) {
			t.Fatalf("the warning must name --insecure-cookies and TLS: %q", msg)
		}
	}
}

func TestTheMCPConfigIsReadWithTheServersEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {"github": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}, "admin_only": true},
		"fs": {"command": "mcp-fs", "args": ["/srv"]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		return map[string]string{"HOMEWORK_MCP_CONFIG": path, "GITHUB_TOKEN": "ghp_x"}[k]
	}
	cfg, err := parseServeConfig(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	gh, ok := cfg.MCP.Lookup("github")
	if !ok || gh.Headers["Authorization"] != "Bearer ghp_x" || !gh.AdminOnly {
		t.Fatalf("github = %+v", gh)
	}
	if fs, ok := cfg.MCP.Lookup("fs"); !ok || fs.Command != "mcp-fs" {
		t.Fatalf("fs = %+v", fs)
	}
}
