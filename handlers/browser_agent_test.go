package handlers

import (
	"testing"

	"github.com/chromedp/chromedp"

	"homework/db"
	"homework/engine"
	"homework/engine/agentcmd"
	"homework/engine/spec"
)

func TestBrowserAgentPresetFillsTheCommand(t *testing.T) {
	root := t.TempDir()
	ts := newTestServerWith(t, func(*db.DB, func() *engine.Engine) map[string]engine.Executor {
		return map[string]engine.Executor{spec.ExecutorCommand: agentcmd.New(agentcmd.Options{Root: root})}
	}, func(o *Options) { o.CommandRunsEnabled = true; o.LLMConfigured = true })
	ctx := newBrowser(t)
	do(t, ctx, "set up the admin",
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#password2")),
		chromedp.SendKeys(chromedp.CSS("#email"), "root@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), pagePassword),
		chromedp.SendKeys(chromedp.CSS("#password2"), pagePassword),
		chromedp.Submit(chromedp.CSS("#password2")),
		chromedp.WaitVisible(chromedp.CSS("#agent_preset")),
		chromedp.SendKeys(chromedp.CSS("#agent_argv"), "bash old.sh"),
	)
	pick := func(preset string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const s = document.getElementById("agent_preset"); s.value = "`+preset+`";
			s.dispatchEvent(new Event("change", {bubbles: true})); return true })()`)); err != nil {
			t.Fatal(err)
		}
	}
	pick("claude")
	until(t, ctx, "the claude preset to fill the command and format",
		`document.getElementById("agent_argv").value === "claude -p --output-format stream-json --verbose --dangerously-skip-permissions" && document.getElementById("agent_output_format").value === "claude-stream-json"`)
	pick("codex")
	until(t, ctx, "the codex preset to replace them",
		`document.getElementById("agent_argv").value === "codex exec --json --full-auto --skip-git-repo-check -" && document.getElementById("agent_output_format").value === "codex-json"`)
	pick("custom")
	until(t, ctx, "the custom preset to leave the command for the person to edit",
		`document.getElementById("agent_argv").value.startsWith("codex exec") && document.getElementById("agent_output_format").value === "text"`)
}
