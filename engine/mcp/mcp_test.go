package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/engine/mcp"
	"homework/engine/mcp/mcptest"
	"homework/engine/proc"
)

func TestParse(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"TOKEN": "s3cret", "HOME": "/home/x"}[k]
	}
	for _, tc := range []struct {
		name, file, err string
	}{
		{name: "a stdio and an http server", file: `{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "x"], "env": {"A": "${TOKEN}", "B": "${NOPE:-dflt}"}, "cwd": "/tmp"},
			"gh": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "admin_only": true}}}`},
		{name: "a missing mcpServers", file: `{"servers": {}}`, err: "mcpServers: missing"},
		{name: "a stdio server without a command", file: `{"mcpServers": {"fs": {"args": ["x"]}}}`, err: "mcpServers.fs.command: required"},
		{name: "an unknown field", file: `{"mcpServers": {"fs": {"command": "x", "enviroment": {}}}}`, err: `mcpServers.fs: unknown field "enviroment"`},
		{name: "an unknown type", file: `{"mcpServers": {"fs": {"type": "ws", "url": "ws://x"}}}`, err: "mcpServers.fs.type: must be"},
		{name: "an http server without a URL", file: `{"mcpServers": {"gh": {"type": "http"}}}`, err: "mcpServers.gh.url: must start with http"},
		{name: "an unset variable", file: `{"mcpServers": {"gh": {"type": "http", "url": "http://x", "headers": {"Authorization": "Bearer ${MISSING}"}}}}`, err: "mcpServers.gh.headers.Authorization: ${MISSING} is not set"},
		{name: "a name with a double underscore", file: `{"mcpServers": {"a__b": {"command": "x"}}}`, err: `mcpServers.a__b: a server name must not contain "__"`},
		{name: "a name with a space", file: `{"mcpServers": {"a b": {"command": "x"}}}`, err: "mcpServers.a b: a server name is"},
		{name: "not JSON", file: `{"mcpServers": `, err: "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := mcp.Parse([]byte(tc.file), env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fs, _ := c.Lookup("fs")
			gh, _ := c.Lookup("gh")
			if fs.Type != mcp.TypeStdio || fs.Env["A"] != "s3cret" || fs.Env["B"] != "dflt" || fs.Cwd != "/tmp" || fs.ToolTimeout != mcp.DefaultToolTimeout {
				t.Errorf("fs = %+v", fs)
			}
			if gh.Type != mcp.TypeHTTP || gh.Headers["Authorization"] != "Bearer s3cret" || !gh.AdminOnly {
				t.Errorf("gh = %+v", gh)
			}
			if s := c.Servers(); len(s) != 2 || s[0].Name != "fs" || s[1].Name != "gh" {
				t.Errorf("servers = %v", s)
			}
		})
	}
}

func TestLoadFileNamesThePath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mcp.json")
	os.WriteFile(p, []byte(`{"mcpServers": {"x": {"type": "http"}}}`), 0o600)
	_, err := mcp.LoadFile(p, nil)
	if err == nil || !strings.HasPrefix(err.Error(), p+": mcpServers.x.url") {
		t.Fatalf("err = %v", err)
	}
}

func stdioConfig(t *testing.T, extra ...string) (*mcp.Config, *mcp.Server, string) {
	t.Helper()
	cmd, args := mcptest.Stdio(extra...)
	pids := filepath.Join(t.TempDir(), "pids")
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"test": map[string]any{
		"command": cmd, "args": args, "env": map[string]string{mcptest.PIDFileEnv: pids}, "tool_timeout_ms": 500}}})
	c, err := mcp.Parse(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.Lookup("test")
	return c, s, pids
}

func TestStdioSession(t *testing.T) {
	c, s, pids := stdioConfig(t)
	leash := proc.NewLeash(time.Minute)
	defer leash.Close()
	ctx := proc.WithLeash(context.Background(), leash)
	sess, err := mcp.Open(ctx, c, s)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	t.Run("it lists the tools with their schemas", func(t *testing.T) {
		var names []string
		for _, tool := range sess.Tools() {
			names = append(names, tool.Name)
			if tool.Name == "echo" && (!tool.ReadOnly || !strings.Contains(string(tool.InputSchema), `"text"`)) {
				t.Errorf("echo = %+v", tool)
			}
		}
		if got := strings.Join(names, ","); !strings.Contains(got, "echo") || !strings.Contains(got, "crash") {
			t.Errorf("tools = %s", got)
		}
		if seen, _ := c.SeenTools("test"); len(seen) != len(names) {
			t.Errorf("seen tools = %v", seen)
		}
	})
	t.Run("a call returns the text", func(t *testing.T) {
		res, err := sess.Call(ctx, "echo", json.RawMessage(`{"text":"hi"}`))
		if err != nil || res.Text != "echo: hi" || res.IsError {
			t.Fatalf("res = %+v, err = %v", res, err)
		}
	})
	t.Run("structured content is returned once", func(t *testing.T) {
		res, err := sess.Call(ctx, "add", json.RawMessage(`{"a":2,"b":3}`))
		if err != nil || strings.Count(res.Text, `"sum":5`) != 1 {
			t.Fatalf("res = %+v, err = %v", res, err)
		}
	})
	t.Run("an image is a placeholder", func(t *testing.T) {
		res, err := sess.Call(ctx, "image", nil)
		if err != nil || !strings.Contains(res.Text, "[image image/png, 9 bytes, not shown]") {
			t.Fatalf("res = %+v, err = %v", res, err)
		}
	})
	t.Run("an isError result is an error result", func(t *testing.T) {
		res, err := sess.Call(ctx, "fail", nil)
		if err != nil || !res.IsError || res.Text != "the widget is jammed" {
			t.Fatalf("res = %+v, err = %v", res, err)
		}
	})
	t.Run("a slow call times out", func(t *testing.T) {
		_, err := sess.Call(ctx, "sleep", json.RawMessage(`{"ms":5000}`))
		var ce *mcp.CallError
		if !errors.As(err, &ce) || ce.Crashed || !strings.Contains(err.Error(), "timed out after 500ms") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a crash names the server and its last stderr line", func(t *testing.T) {
		_, err := sess.Call(ctx, "crash", nil)
		var ce *mcp.CallError
		if !errors.As(err, &ce) || !ce.Crashed || !strings.Contains(err.Error(), "MCP server test") || !strings.Contains(err.Error(), mcptest.CrashLine) {
			t.Fatalf("err = %v", err)
		}
	})
	sess.Close()
	for _, pid := range mcptest.PIDs(t, pids) {
		if mcptest.Alive(pid) {
			t.Errorf("server process %d outlived its session", pid)
		}
	}
}

func TestStdioSessionEnds(t *testing.T) {
	t.Run("a server that fails to start is named with its last stderr line", func(t *testing.T) {
		c, s, _ := stdioConfig(t, mcptest.CrashAtStart)
		_, err := mcp.Open(context.Background(), c, s)
		var se *mcp.StartError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "MCP server test") || !strings.Contains(err.Error(), mcptest.StartFailure) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a missing command is named", func(t *testing.T) {
		c, err := mcp.Parse([]byte(`{"mcpServers": {"nope": {"command": "/nonexistent/mcp-server"}}}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := c.Lookup("nope")
		_, err = mcp.Open(context.Background(), c, s)
		if err == nil || !strings.Contains(err.Error(), "MCP server nope") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("closing the leash kills the server", func(t *testing.T) {
		c, s, pids := stdioConfig(t)
		leash := proc.NewLeash(time.Minute)
		ctx := proc.WithLeash(context.Background(), leash)
		sess, err := mcp.Open(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		leash.Close()
		_, err = sess.Call(ctx, "sleep", json.RawMessage(`{"ms":100}`))
		var ce *mcp.CallError
		if !errors.As(err, &ce) || !ce.Crashed {
			t.Errorf("err = %v", err)
		}
		for _, pid := range mcptest.PIDs(t, pids) {
			if mcptest.Alive(pid) {
				t.Errorf("server process %d outlived its leash", pid)
			}
		}
	})
	t.Run("the end of the context kills the server", func(t *testing.T) {
		c, s, pids := stdioConfig(t)
		ctx, cancel := context.WithCancel(context.Background())
		sess, err := mcp.Open(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		done := make(chan error, 1)
		go func() {
			_, err := sess.Call(ctx, "sleep", json.RawMessage(`{"ms":400}`))
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v", err)
		}
		sess.Close()
		for _, pid := range mcptest.PIDs(t, pids) {
			if mcptest.Alive(pid) {
				t.Errorf("server process %d outlived its context", pid)
			}
		}
	})
}

func TestHTTPSession(t *testing.T) {
	url := mcptest.HTTP(t, "s3cret")
	file := `{"mcpServers": {"remote": {"type": "http", "url": "` + url + `", "headers": {"Authorization": "Bearer ${TEST_TOKEN}"}},
		"bad": {"type": "http", "url": "` + url + `"}}}`
	c, err := mcp.Parse([]byte(file), func(k string) string { return map[string]string{"TEST_TOKEN": "s3cret"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the expanded headers are sent and tools are called", func(t *testing.T) {
		s, _ := c.Lookup("remote")
		sess, err := mcp.Open(context.Background(), c, s)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		res, err := sess.Call(context.Background(), "echo", json.RawMessage(`{"text":"over http"}`))
		if err != nil || res.Text != "echo: over http" {
			t.Fatalf("res = %+v, err = %v", res, err)
		}
	})
	t.Run("the older SSE transport works too", func(t *testing.T) {
		c, err := mcp.Parse([]byte(`{"mcpServers": {"old": {"type": "sse", "url": "`+mcptest.SSE(t)+`"}}}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := c.Lookup("old")
		sess, err := mcp.Open(context.Background(), c, s)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		res, err := sess.Call(context.Background(), "echo", json.RawMessage(`{"text":"over sse"}`))
		if err != nil || res.Text != "echo: over sse" {
			t.Fatalf("res = %+v, err = %v", res, err)
		}
	})
	t.Run("a refused connection names the server", func(t *testing.T) {
		s, _ := c.Lookup("bad")
		_, err := mcp.Open(context.Background(), c, s)
		var se *mcp.StartError
		if !errors.As(err, &se) || se.Server != "bad" {
			t.Fatalf("err = %v", err)
		}
	})
}
