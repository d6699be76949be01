package handlers

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"homework/db"
	"homework/engine"
	"homework/engine/agentcmd"
	"homework/engine/spec"
)

func TestComposerAgentPresets(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wd := filepath.Join(root, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	ts := newTestServerWith(t, func(*db.DB, func() *engine.Engine) map[string]engine.Executor {
		return map[string]engine.Executor{spec.ExecutorCommand: agentcmd.New(agentcmd.Options{Root: root})}
	}, func(o *Options) { o.CommandRunsEnabled = true; o.LLMConfigured = true })
	pc := newPageClient(t, ts)
	pc.get("/setup")
	resp, body := pc.post("/setup", url.Values{"email": {"root@example.com"}, "password": {pagePassword}, "password2": {pagePassword}})
	expectStatus(t, resp, body, http.StatusSeeOther, "/runs/new")

	t.Run("the composer offers the presets with their commands and the output formats", func(t *testing.T) {
		_, body := pc.get("/runs/new")
		expectContains(t, body, `name="agent_preset"`, `value="claude" data-argv="claude -p --output-format stream-json --verbose --dangerously-skip-permissions" data-format="claude-stream-json"`,
			`data-argv="codex exec --json --full-auto --skip-git-repo-check -"`, `name="agent_output_format"`, `<option value="codex-json"`, `name="agent_resume"`)
	})
	t.Run("a preset with an empty command fills in its argv and output format", func(t *testing.T) {
		resp, body := pc.post("/runs", url.Values{"objective": {"Fix the build."}, "mode": {"auto"}, "executor": {"command"},
			"agent_preset": {"codex"}, "agent_argv": {""}, "agent_workdir": {wd}, "agent_resume": {"1"}})
		expectStatus(t, resp, body, http.StatusSeeOther, "")
		id := strings.TrimPrefix(resp.Header.Get("Location"), "/runs/")
		r, err := ts.DB.FindRun(ts.ctx, ts.userID(t, "root@example.com").ID, id)
		if err != nil {
			t.Fatal(err)
		}
		a := mustConfig(t, r).Agent
		if strings.Join(a.Argv, " ") != "codex exec --json --full-auto --skip-git-repo-check -" || a.OutputFormat != agentcmd.FormatCodexJSON || !a.Resume || a.Preset != "codex" {
			t.Errorf("stored agent %+v", a)
		}
	})
	t.Run("an unknown output format is refused on its field", func(t *testing.T) {
		resp, body := pc.post("/runs", url.Values{"objective": {"Fix the build."}, "mode": {"auto"}, "executor": {"command"},
			"agent_argv": {"bash agent.sh"}, "agent_output_format": {"xml"}, "agent_workdir": {wd}})
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, "agent.output_format must be one of text, claude-json, claude-stream-json, codex-json, gemini-json")
	})
}
