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

func TestBrowserComposerShowsThePriceAsThePresetAndModelChange(t *testing.T) {
	root := t.TempDir()
	ts := newTestServerWith(t, func(*db.DB, func() *engine.Engine) map[string]engine.Executor {
		return map[string]engine.Executor{spec.ExecutorCommand: agentcmd.New(agentcmd.Options{Root: root})}
	}, func(o *Options) { o.CommandRunsEnabled = true; o.LLMConfigured = true; o.DefaultModel = "gpt-4.1-mini" })
	ctx := newBrowser(t)
	do(t, ctx, "set up the admin",
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#password2")),
		chromedp.SendKeys(chromedp.CSS("#email"), "root@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), pagePassword),
		chromedp.SendKeys(chromedp.CSS("#password2"), pagePassword),
		chromedp.Submit(chromedp.CSS("#password2")),
		chromedp.WaitVisible(chromedp.CSS("#price-note")),
	)
	note := `document.getElementById("price-note").textContent`
	until(t, ctx, "the note to price the server's default model", note+`.includes("gpt-4.1-mini (the server's default): $0.40 input")`)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		document.querySelector('input[name="executor"][value="command"]').click();
		const s = document.getElementById("agent_preset"); s.value = "codex";
		s.dispatchEvent(new Event("change", {bubbles: true})); return true })()`)); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the codex preset to be priced as its default model", note+`.includes("gpt-5-codex (codex's default): $1.25 input")`)
	do(t, ctx, "type an unpriced model", chromedp.SendKeys(chromedp.CSS("#model"), "gpt-9-codex"))
	until(t, ctx, "the note to say the cost budget will be refused", note+`.includes("gpt-9-codex (the run's model) has no known price: a cost budget will be refused")`)
}
