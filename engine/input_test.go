package engine

import (
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

func TestTextInputRefusesControlsAndBidiOverridesEverywhere(t *testing.T) {
	h := newHarness(t, nil)
	u := h.user("input@example.com")
	bad := map[string]string{
		"C0":           "fix \x1b[31mthis",
		"C1":           "fix \u0085this",
		"RLO":          "fix \u202ethis",
		"LRI":          "fix \u2066this\u2069",
		"invalid UTF8": "fix \xffthis",
	}
	for name, text := range bad {
		_, err := h.e.CreateRun(h.ctx, u, spec.Config{Objective: text, Executor: spec.ExecutorScript, Script: script(done("x"))})
		if de, ok := err.(*spec.Error); !ok || de.Field != "objective" {
			t.Errorf("objective with %s: %v", name, err)
		}
	}
	r := h.create(u, spec.Config{Script: script(scripted.Step{Status: &spec.Status{NeedsUserInput: true, BlockingQuestions: []string{"which?"}}})})
	h.waitStatus(u, r.ID, spec.StatusWaiting)
	for name, text := range bad {
		if _, err := h.e.Message(h.ctx, u.ID, r.ID, text); spec.ErrorCode(err) != spec.EINVALID {
			t.Errorf("message with %s: %v", name, err)
		}
		if _, err := h.e.Respond(h.ctx, u.ID, r.ID, []string{text}); spec.ErrorCode(err) != spec.EINVALID {
			t.Errorf("answer with %s: %v", name, err)
		}
	}
	// Ordinary text, tabs and newlines included, and right-to-left letters pass.
	if _, err := h.e.Message(h.ctx, u.ID, r.ID, "also\tcheck\nשלום"); err != nil {
		t.Fatalf("plain message: %v", err)
	}
}

func TestAScriptIsRefusedOutsideScriptRuns(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Executors[spec.ExecutorLLM] = o.Executors[spec.ExecutorScript] })
	u := h.user("script@example.com")
	_, err := h.e.CreateRun(h.ctx, u, spec.Config{Objective: "x", Executor: spec.ExecutorLLM, Script: script(done("x"))})
	if de, ok := err.(*spec.Error); !ok || de.Field != "script" {
		t.Fatalf("script on an llm run: %v", err)
	}
	delete(h.e.opts.Executors, spec.ExecutorScript)
	_, err = h.e.CreateRun(h.ctx, u, spec.Config{Objective: "x", Executor: spec.ExecutorLLM, Script: script(done("x"))})
	if de, ok := err.(*spec.Error); !ok || de.Field != "script" || de.Message == "" {
		t.Fatalf("script without the script executor: %v", err)
	}
}
