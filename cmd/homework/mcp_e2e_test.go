package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"homework/engine/llm/llmtest"
	"homework/engine/mcp/mcptest"
	"homework/engine/spec"
)

// TestMCPToolsThroughTheBinary: the real server started with --mcp-config
// runs an LLM run whose model calls a stdio MCP server's tool (this test
// binary, re-executed as the server), lists the server with the tools the
// run saw, stops the server at the iteration's end, and, killed with
// SIGKILL in the middle of a call, takes the MCP server with it.
func TestMCPToolsThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	cmd, args := mcptest.Stdio()
	t.Setenv("MCPTEST_PIDS_AT", pids)
	conf, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"test": map[string]any{
		"command": cmd, "args": args, "env": map[string]string{mcptest.PIDFileEnv: "${MCPTEST_PIDS_AT}"}}}})
	confPath := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var seen []string // the tool results the model was sent
	endpoint := llmtest.New(t)
	endpoint.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
		if isSummarizer(r) {
			return llmtest.Text("A narrative."), true
		}
		var results []string
		for _, m := range r.Messages {
			if m.Role == "tool" {
				results = append(results, m.Content)
			}
		}
		mu.Lock()
		seen = results
		mu.Unlock()
		switch {
		case strings.Contains(r.Messages[1].Content, "sleep") && len(results) == 0:
			return llmtest.Tools(llmtest.ToolCall("mcp__test__sleep", map[string]any{"ms": 60000})), true
		case len(results) == 0:
			return llmtest.Tools(llmtest.ToolCall("mcp__test__pid", map[string]any{})), true
		}
		return llmtest.Tools(llmtest.ToolCall("report_status", map[string]any{"exit_signal": true, "progress_summary": "done",
			"completion_evidence": []string{"called the tool"}})), true
	})
	dbPath := filepath.Join(dir, "mcp.db")
	s := llmServer(t, bin, dbPath, endpoint, "--mcp-config", confPath)
	token := userAndToken(t, bin, dbPath)

	t.Run("a run calls the server's tool and the server ends with the iteration", func(t *testing.T) {
		id := s.createRun(t, token, map[string]any{"objective": "ask the tool for its pid", "executor": "llm", "mcp_servers": []string{"test"}})
		waitRunStatus(t, s, token, id, "completed")
		mu.Lock()
		results := seen
		mu.Unlock()
		pid, err := strconv.Atoi(strings.TrimSpace(results[0]))
		if err != nil || pid <= 1 {
			t.Fatalf("the model was sent %q", results)
		}
		if got := mcptest.PIDs(t, pids); len(got) != 1 || got[0] != pid {
			t.Errorf("servers started: %v, the tool answered %d", got, pid)
		}
		if mcptest.Alive(pid) {
			t.Errorf("the MCP server %d outlived its iteration", pid)
		}
		var list struct {
			Servers []struct {
				Name  string
				Tools []string
			}
		}
		if code := s.api(t, token, "GET", "/api/mcp/servers", nil, &list); code != 200 || len(list.Servers) != 1 ||
			list.Servers[0].Name != "test" || !strings.Contains(strings.Join(list.Servers[0].Tools, ","), "pid") {
			t.Errorf("GET /api/mcp/servers: %d %+v", code, list)
		}
	})
	t.Run("a server killed with SIGKILL takes its MCP server with it", func(t *testing.T) {
		os.Remove(pids)
		id := s.createRun(t, token, map[string]any{"objective": "sleep in the tool", "executor": "llm", "mcp_servers": []string{"test"}})
		s.follow(t, token, id, func(typ spec.EventType) bool { return typ == "tool_call" })
		got := mcptest.PIDs(t, pids)
		if len(got) != 1 || !mcptest.Alive(got[0]) {
			t.Fatalf("the MCP server is not running: %v", got)
		}
		s.kill()
		deadline := time.Now().Add(10 * time.Second)
		for mcptest.Alive(got[0]) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if mcptest.Alive(got[0]) {
			t.Errorf("the MCP server %d outlived the killed server", got[0])
		}
	})
}
