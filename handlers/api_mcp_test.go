package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"homework/db"
	"homework/engine"
	"homework/engine/llm"
	"homework/engine/mcp"
	"homework/engine/mcp/mcptest"
	"homework/engine/spec"
)

// mcpTestServer is a test server whose LLM executor (pointed at no live
// endpoint) knows the stdio test server as "test" and an admin_only one as
// "secret".
func mcpTestServer(t *testing.T) (*testServer, *mcp.Config) {
	t.Helper()
	cmd, args := mcptest.Stdio()
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"test":   map[string]any{"command": cmd, "args": args},
		"secret": map[string]any{"type": "http", "url": "http://127.0.0.1:1/mcp", "admin_only": true},
	}})
	c, err := mcp.Parse(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServerWith(t, func(d *db.DB, eng func() *engine.Engine) map[string]engine.Executor {
		x, err := llm.New(llm.Options{Store: d, BaseURL: "http://127.0.0.1:1/v1", DefaultModel: "m", MCP: c})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]engine.Executor{spec.ExecutorLLM: x}
	}, func(o *Options) { o.MCP = c })
	return ts, c
}

func (ts *testServer) admin(t *testing.T, email string) *testUser {
	t.Helper()
	u, err := ts.Store.CreateUser(ts.ctx, email, "x", true)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := ts.Store.CreateAPIToken(ts.ctx, u.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &testUser{User: u, Token: tok}
}

func TestAPIMCPServers(t *testing.T) {
	ts, c := mcpTestServer(t)
	alice, root := ts.user(t, "alice@example.com"), ts.admin(t, "root@example.com")
	names := func(u *testUser) ([]string, []MCPServerJSON) {
		var out struct{ Servers []MCPServerJSON }
		ts.expect(t, u, "GET", "/api/mcp/servers", nil, http.StatusOK, &out)
		var n []string
		for _, s := range out.Servers {
			n = append(n, s.Name)
		}
		return n, out.Servers
	}

	t.Run("a user sees the servers they may use, an admin the admin_only ones too", func(t *testing.T) {
		if got, _ := names(alice); !slices.Equal(got, []string{"test"}) {
			t.Errorf("alice sees %v", got)
		}
		if got, _ := names(root); !slices.Equal(got, []string{"secret", "test"}) {
			t.Errorf("an admin sees %v", got)
		}
	})
	t.Run("the tools a run's session listed are shown", func(t *testing.T) {
		_, servers := names(alice)
		if servers[0].Tools != nil {
			t.Fatalf("tools before any session: %v", servers[0].Tools)
		}
		s, _ := c.Lookup("test")
		sess, err := mcp.Open(context.Background(), c, s)
		if err != nil {
			t.Fatal(err)
		}
		sess.Close()
		_, servers = names(alice)
		if !slices.Contains(servers[0].Tools, "echo") || servers[0].ToolsSeenAt == nil || servers[0].ToolTimeoutMS != 60000 {
			t.Errorf("test = %+v", servers[0])
		}
	})
	t.Run("a run naming an unknown server is refused with the index", func(t *testing.T) {
		ts.expectError(t, alice, "POST", "/api/runs", map[string]any{"objective": "x", "mcp_servers": []string{"test", "nope"}},
			http.StatusBadRequest, spec.EINVALID, "mcp_servers[1]")
	})
	t.Run("a run naming an admin_only server is refused to a user", func(t *testing.T) {
		ts.expectError(t, alice, "POST", "/api/runs", map[string]any{"objective": "x", "mcp_servers": []string{"secret"}},
			http.StatusForbidden, spec.EFORBIDDEN, "mcp_servers[0]")
	})
	t.Run("mcp_servers on a run of another executor is refused", func(t *testing.T) {
		ts.expectError(t, root, "POST", "/api/runs", map[string]any{"objective": "x", "executor": "script", "mcp_servers": []string{"test"}},
			http.StatusBadRequest, spec.EINVALID, "mcp_servers")
	})
}

func TestComposerOffersMCPServers(t *testing.T) {
	ts, _ := mcpTestServer(t)
	pc := ts.signedIn(t, "dora@example.com")
	dora := ts.userID(t, "dora@example.com")

	resp, body := pc.get("/runs/new")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, `id="mcp-servers"`, `name="mcp_servers" value="test"`, "its tools are listed once a run has used it")
	expectLacks(t, body, `value="secret"`)

	t.Run("an unknown server is shown on its field", func(t *testing.T) {
		resp, body := pc.post("/runs", url.Values{"objective": {"Use the tools"}, "mode": {"auto"}, "mcp_servers": {"test", "gone"}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="mcp_servers-error"`, "There is no MCP server")
	})
	t.Run("the checked servers are the run's, and Run again keeps them", func(t *testing.T) {
		id := pc.compose(t, url.Values{"objective": {"Use the tools"}, "mode": {"auto"}, "mcp_servers": {"test"}})
		if _, err := ts.Engine.Cancel(ts.ctx, dora.ID, id); err != nil {
			t.Fatal(err)
		}
		r, err := ts.Store.FindRun(ts.ctx, dora.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := runConfigOf(r)
		if err != nil || !slices.Equal(cfg.MCPServers, []string{"test"}) || cfg.Executor != spec.ExecutorLLM {
			t.Fatalf("config = %+v (%v)", cfg, err)
		}
		resp, body := pc.get("/runs/new?from=" + id)
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, `value="test" checked`)
	})
}
