package llm_test

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/engine/llm"
	"homework/engine/llm/llmtest"
	"homework/engine/mcp"
	"homework/engine/mcp/mcptest"
	"homework/engine/spec"
)

// mcpServers returns a configuration with the stdio test server as "test"
// (started with args), an admin_only copy as "secret", and the servers of
// extra (name to raw JSON entry), and the file the stdio servers write
// their process ids to.
func mcpServers(t *testing.T, extra map[string]any, args ...string) (*mcp.Config, string) {
	t.Helper()
	cmd, argv := mcptest.Stdio(args...)
	pids := filepath.Join(t.TempDir(), "pids")
	servers := map[string]any{
		"test":   map[string]any{"command": cmd, "args": argv, "env": map[string]string{mcptest.PIDFileEnv: pids}, "tool_timeout_ms": 20000},
		"secret": map[string]any{"command": cmd, "args": argv, "admin_only": true},
	}
	for k, v := range extra {
		servers[k] = v
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": servers})
	c, err := mcp.Parse(b, func(k string) string { return map[string]string{"REMOTE_TOKEN": "s3cret"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	return c, pids
}

func withMCP(c *mcp.Config) e2eOptions {
	return e2eOptions{llm: func(o *llm.Options) { o.MCP = c }}
}

// noServerOutlives fails the test if a stdio server of pids still runs.
func noServerOutlives(t *testing.T, pids string, want int) {
	t.Helper()
	got := mcptest.PIDs(t, pids)
	if len(got) != want {
		t.Errorf("%d servers started, want %d", len(got), want)
	}
	for _, pid := range got {
		if mcptest.Alive(pid) {
			t.Errorf("MCP server process %d outlived its iteration", pid)
		}
	}
}

// toolMessages returns the tool results the request sent back to the model.
func toolMessages(r llmtest.Request) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "tool" {
			out = append(out, m.Content)
		}
	}
	return out
}

func TestLLMRunsUseMCPTools(t *testing.T) {
	t.Run("a run calls a stdio server's tools: results reach the model, events, transcript and budgets see them", func(t *testing.T) {
		t.Parallel()
		c, pids := mcpServers(t, nil)
		h := newE2E(t, withMCP(c),
			tools(call("mcp__test__echo", map[string]any{"text": "hello"}), call("mcp__test__add", map[string]any{"a": 2, "b": 3}),
				call("mcp__test__fail", map[string]any{}), call("mcp__test__big", map[string]any{"bytes": 20000}),
				call("mcp__test__image", map[string]any{})),
			status(true, "Used the MCP tools.", "echo answered"),
		)
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{MCPServers: []string{"test"}}).ID, spec.StatusCompleted)

		reqs := requestsOf(h.srv, reqPlanner)
		if len(reqs) != 2 {
			t.Fatalf("%d planner requests", len(reqs))
		}
		if !reqs[0].HasTool("mcp__test__echo") || !reqs[0].HasTool("workspace_write") || !reqs[0].HasTool("report_status") {
			t.Errorf("the first request did not offer the MCP tools beside the built-in ones")
		}
		for _, tool := range reqs[0].Tools {
			if tool.Function.Name == "mcp__test__echo" {
				b, _ := json.Marshal(tool.Function.Parameters)
				if !strings.Contains(string(b), `"text"`) || !strings.Contains(tool.Function.Description, "MCP server test") {
					t.Errorf("echo is offered as %s: %s", tool.Function.Description, b)
				}
			}
		}
		results := toolMessages(reqs[1])
		if len(results) != 5 {
			t.Fatalf("tool results = %q", results)
		}
		for i, want := range []string{"echo: hello", `"sum":5`, "error: the widget is jammed", "more bytes of the result were dropped", "[image image/png, 9 bytes, not shown]"} {
			if !strings.Contains(results[i], want) {
				t.Errorf("tool result %d = %.200q, want it to contain %q", i, results[i], want)
			}
		}
		if !strings.HasPrefix(results[3], "xxxx") || len(results[3]) > 6200 {
			t.Errorf("the big result is %d bytes", len(results[3]))
		}

		var oks []string
		for _, e := range h.eventsOf(run.ID, spec.EventToolResult) {
			oks = append(oks, e["tool"].(string)+"="+map[bool]string{true: "ok", false: "error"}[e["ok"] == true])
		}
		if got := strings.Join(oks, " "); got != "mcp__test__echo=ok mcp__test__add=ok mcp__test__fail=error mcp__test__big=ok mcp__test__image=ok report_status=ok" {
			t.Errorf("tool results = %s", got)
		}
		if run.Metrics.ToolCallsTotal != 6 {
			t.Errorf("tool calls = %d, want 6 (5 MCP calls and report_status)", run.Metrics.ToolCallsTotal)
		}

		tr, err := h.db.FindTranscript(h.ctx, h.user.ID, run.ID, 1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		find := func(kind, name, text string) {
			t.Helper()
			for _, l := range tr.Lines {
				if l.Kind == kind && l.Name == name && strings.Contains(l.Text, text) {
					return
				}
			}
			t.Errorf("no %s %s line containing %q", kind, name, text)
		}
		find(spec.TranscriptNote, "mcp", `mcp__test__echo = tool "echo" of MCP server test`)
		find(spec.TranscriptToolCall, "mcp__test__echo", `"text":"hello"`)
		find(spec.TranscriptToolResult, "mcp__test__echo", "echo: hello")
		find(spec.TranscriptToolResult, "mcp__test__fail", "the widget is jammed")
		noServerOutlives(t, pids, 1)
	})

	t.Run("an HTTP server's tools are called with the configured headers", func(t *testing.T) {
		t.Parallel()
		url := mcptest.HTTP(t, "s3cret")
		c, _ := mcpServers(t, map[string]any{"remote": map[string]any{"type": "http", "url": url,
			"headers": map[string]string{"Authorization": "Bearer ${REMOTE_TOKEN}"}}})
		h := newE2E(t, withMCP(c),
			tools(call("mcp__remote__echo", map[string]any{"text": "over http"})),
			status(true, "Done.", "echo answered"),
		)
		narrate(h.srv, "A narrative.")
		h.waitStatus(h.create(spec.Config{MCPServers: []string{"remote"}}).ID, spec.StatusCompleted)
		reqs := requestsOf(h.srv, reqPlanner)
		if got := toolMessages(reqs[1]); len(got) != 1 || got[0] != "echo: over http" {
			t.Errorf("tool results = %q", got)
		}
	})

	t.Run("a call that outlasts the server's tool timeout is an error the model sees", func(t *testing.T) {
		t.Parallel()
		cmd, argv := mcptest.Stdio()
		c, _ := mcpServers(t, map[string]any{"slow": map[string]any{"command": cmd, "args": argv, "tool_timeout_ms": 300}})
		h := newE2E(t, withMCP(c),
			tools(call("mcp__slow__sleep", map[string]any{"ms": 10000})),
			status(true, "Done.", "the call timed out"),
		)
		narrate(h.srv, "A narrative.")
		h.waitStatus(h.create(spec.Config{MCPServers: []string{"slow"}}).ID, spec.StatusCompleted)
		reqs := requestsOf(h.srv, reqPlanner)
		if got := toolMessages(reqs[1]); len(got) != 1 || !strings.Contains(got[0], "error: MCP server slow: the call timed out after 300ms") {
			t.Errorf("tool results = %q", got)
		}
	})

	t.Run("MCP calls count against the iteration's tool-call bound", func(t *testing.T) {
		t.Parallel()
		c, _ := mcpServers(t, nil)
		h := newE2E(t, withMCP(c),
			tools(call("mcp__test__echo", map[string]any{"text": "a"}), call("mcp__test__echo", map[string]any{"text": "b"}),
				call("mcp__test__echo", map[string]any{"text": "c"})),
			status(true, "Done.", "echo answered"),
		)
		narrate(h.srv, "A narrative.")
		h.waitStatus(h.create(spec.Config{MCPServers: []string{"test"}, Budgets: spec.Budgets{IterationToolCalls: 2}}).ID, spec.StatusCompleted)
		reqs := requestsOf(h.srv, reqPlanner)
		got := toolMessages(reqs[1])
		if len(got) != 3 || got[1] != "echo: b" || !strings.Contains(got[2], "not run: the iteration's tool-call bound was reached") {
			t.Errorf("tool results = %q", got)
		}
		if reqs[1].HasTool("mcp__test__echo") {
			t.Errorf("the last turn still offered MCP tools")
		}
	})

	t.Run("MCP calls count against the run's tool-call budget", func(t *testing.T) {
		t.Parallel()
		c, pids := mcpServers(t, nil)
		h := newE2E(t, withMCP(c),
			tools(call("mcp__test__echo", map[string]any{"text": "a"}), call("mcp__test__echo", map[string]any{"text": "b"}),
				call("mcp__test__echo", map[string]any{"text": "c"})),
			status(false, "More to do."),
		)
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{MCPServers: []string{"test"}, Budgets: spec.Budgets{MaxToolCalls: 2}}).ID, spec.StatusStopped)
		if run.StopReason == nil || run.StopReason.Type != spec.StopBudgetToolCalls {
			t.Errorf("stop reason = %+v", run.StopReason)
		}
		noServerOutlives(t, pids, 1)
	})

	t.Run("repeating the same MCP call trips the stuck detector", func(t *testing.T) {
		t.Parallel()
		c, _ := mcpServers(t, nil)
		same := call("mcp__test__echo", map[string]any{"text": "again"})
		h := newE2E(t, withMCP(c), tools(same), tools(same), tools(same), tools(same))
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{MCPServers: []string{"test"}}).ID, spec.StatusStopped)
		if run.StopReason == nil || run.StopReason.Type != spec.StopStuck {
			t.Errorf("stop reason = %+v", run.StopReason)
		}
	})

	t.Run("a server that crashes is restarted once, then named with its last stderr line", func(t *testing.T) {
		t.Parallel()
		c, pids := mcpServers(t, nil)
		h := newE2E(t, withMCP(c),
			tools(call("mcp__test__crash", map[string]any{})),
			tools(call("mcp__test__echo", map[string]any{"text": "still there?"})),
			status(false, "The server crashed."),
		)
		narrate(h.srv, "A narrative.")
		// The iteration's error (the crash) keeps the run from completing.
		run := h.create(spec.Config{MCPServers: []string{"test"}, Budgets: spec.Budgets{MaxIterations: 1}})
		run = h.waitStatus(run.ID, spec.StatusStopped)
		reqs := requestsOf(h.srv, reqPlanner)
		crash := toolMessages(reqs[1])
		if len(crash) != 1 || !strings.Contains(crash[0], "MCP server test") || !strings.Contains(crash[0], mcptest.CrashLine) {
			t.Errorf("the model was told %q", crash)
		}
		if later := toolMessages(reqs[2]); !strings.Contains(later[1], "the MCP server test is unavailable in this iteration") {
			t.Errorf("a later call was answered %q", later[1])
		}
		its := h.iterations(run.ID)
		if !strings.Contains(its[0].Error, "MCP server test") || !strings.Contains(its[0].Error, mcptest.CrashLine) {
			t.Errorf("iteration error = %q", its[0].Error)
		}
		noServerOutlives(t, pids, 2)
	})

	t.Run("a server that fails to start fails the iteration, naming it and its last stderr line", func(t *testing.T) {
		t.Parallel()
		c, pids := mcpServers(t, nil, mcptest.CrashAtStart)
		h := newE2E(t, withMCP(c))
		narrate(h.srv, "A narrative.")
		run := h.create(spec.Config{MCPServers: []string{"test"}, Budgets: spec.Budgets{MaxIterations: 1}})
		run = h.waitStatus(run.ID, spec.StatusStopped)
		its := h.iterations(run.ID)
		if len(its) != 1 || !strings.Contains(its[0].Error, "MCP server test") || !strings.Contains(its[0].Error, mcptest.StartFailure) {
			t.Fatalf("iterations = %+v", its)
		}
		if n := len(requestsOf(h.srv, reqPlanner)); n != 0 {
			t.Errorf("%d model calls without the run's tools", n)
		}
		noServerOutlives(t, pids, 2)
	})

	t.Run("a run that keeps failing on a server stops as tool_unavailable, naming it", func(t *testing.T) {
		t.Parallel()
		c, pids := mcpServers(t, nil, mcptest.CrashAtStart)
		h := newE2E(t, withMCP(c))
		narrate(h.srv, "A narrative.")
		run := h.create(spec.Config{MCPServers: []string{"test"}, Breakers: spec.Breakers{RepeatedError: 2}, Budgets: spec.Budgets{MaxIterations: 5}})
		run = h.waitStatus(run.ID, spec.StatusStopped)
		if run.StopReason == nil || run.StopReason.Type != spec.StopToolUnavailable ||
			!strings.Contains(run.StopReason.Detail, "MCP server test") || len(h.iterations(run.ID)) != 2 {
			t.Fatalf("stop %+v after %d iterations; want tool_unavailable after 2, naming the server", run.StopReason, len(h.iterations(run.ID)))
		}
		noServerOutlives(t, pids, 4)
	})

	t.Run("canceling the run kills its stdio server in the middle of a call", func(t *testing.T) {
		t.Parallel()
		c, pids := mcpServers(t, nil)
		h := newE2E(t, withMCP(c), tools(call("mcp__test__sleep", map[string]any{"ms": 15000})))
		run := h.create(spec.Config{MCPServers: []string{"test"}})
		h.waitFor(run.ID, "the sleep call", func(*spec.Run) bool {
			return len(h.eventsOf(run.ID, spec.EventToolCall)) > 0
		})
		if _, err := h.eng.Cancel(h.ctx, h.user.ID, run.ID); err != nil {
			t.Fatal(err)
		}
		h.waitStatus(run.ID, spec.StatusCanceled)
		deadline := time.Now().Add(10 * time.Second)
		for _, pid := range mcptest.PIDs(t, pids) {
			for mcptest.Alive(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if mcptest.Alive(pid) {
				t.Errorf("MCP server process %d outlived its canceled run", pid)
			}
		}
	})

	t.Run("a read_only run is offered only the tools that change nothing", func(t *testing.T) {
		t.Parallel()
		c, _ := mcpServers(t, nil)
		h := newE2E(t, withMCP(c), status(true, "Done.", "nothing to do"))
		narrate(h.srv, "A narrative.")
		h.waitStatus(h.create(spec.Config{MCPServers: []string{"test"}, Permissions: spec.Permissions{WriteMode: spec.WriteReadOnly}}).ID, spec.StatusCompleted)
		req := requestsOf(h.srv, reqPlanner)[0]
		if !req.HasTool("mcp__test__echo") || req.HasTool("mcp__test__crash") {
			t.Errorf("a read_only run was offered the wrong MCP tools")
		}
	})
}

func TestMCPServersAreValidated(t *testing.T) {
	c, _ := mcpServers(t, nil)
	h := newE2E(t, withMCP(c))
	for _, tc := range []struct {
		name    string
		servers []string
		code    string
		field   string
	}{
		{name: "an unknown server is refused with its index", servers: []string{"test", "nope"}, code: spec.EINVALID, field: "mcp_servers[1]"},
		{name: "a server named twice is refused", servers: []string{"test", "test"}, code: spec.EINVALID, field: "mcp_servers[1]"},
		{name: "an admin_only server is refused to others", servers: []string{"secret"}, code: spec.EFORBIDDEN, field: "mcp_servers[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.eng.CreateRun(h.ctx, h.user, spec.Config{Objective: "x", Executor: spec.ExecutorLLM, MCPServers: tc.servers})
			var se *spec.Error
			if !errors.As(err, &se) || se.Code != tc.code || se.Field != tc.field {
				t.Fatalf("err = %#v", err)
			}
		})
	}
	t.Run("an admin may use an admin_only server", func(t *testing.T) {
		admin := *h.user
		admin.IsAdmin = true
		if err := h.x.ValidateConfig(h.ctx, &admin, &spec.Config{MCPServers: []string{"secret"}}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a server without MCP servers refuses mcp_servers", func(t *testing.T) {
		h := newE2E(t, e2eOptions{})
		_, err := h.eng.CreateRun(h.ctx, h.user, spec.Config{Objective: "x", Executor: spec.ExecutorLLM, MCPServers: []string{"test"}})
		if spec.ErrorCode(err) != spec.EINVALID || !strings.Contains(spec.ErrorMessage(err), "--mcp-config") {
			t.Fatalf("err = %v", err)
		}
	})
}
