package agentcmd_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"homework/engine/agentcmd"
	"homework/engine/spec"
)

func TestCommandRunWriteModes(t *testing.T) {
	h := newE2E(t, e2eConfig{})

	t.Run("a read_only agent that writes a file stops the run as read_only_violation with the change as evidence", func(t *testing.T) {
		h := h.in(t)
		wd := h.workdir("ro-writer")
		writeFile(t, wd, "notes.txt", "keep me\n")
		script, state := agent(t, countInvocation+savePrompt+`echo "I looked around." 
echo "patched" >> notes.txt
echo "new" > extra.txt`)
		cfg := commandRun(script, wd)
		cfg.Permissions.WriteMode = spec.WriteReadOnly
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != agentcmd.StopReadOnlyViolation {
			t.Fatalf("run is %s (%+v), want stopped for read_only_violation\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		if run.Metrics.Iterations != 1 {
			t.Errorf("%d iterations, want 1", run.Metrics.Iterations)
		}
		var ev struct {
			Changes agentcmd.Changes `json:"changes"`
		}
		if err := json.Unmarshal(run.StopReason.Evidence, &ev); err != nil {
			t.Fatalf("evidence %s: %v", run.StopReason.Evidence, err)
		}
		if !slices.Equal(ev.Changes.Created, []string{"extra.txt"}) || !slices.Equal(ev.Changes.Modified, []string{"notes.txt"}) {
			t.Errorf("evidence changes %+v", ev.Changes)
		}
		if !strings.Contains(run.StopReason.Detail, "extra.txt") {
			t.Errorf("stop detail %q", run.StopReason.Detail)
		}
		if p := readFile(t, filepath.Join(state, "prompt-1.txt")); !strings.Contains(p, "This run is read_only") {
			t.Errorf("the prompt does not say the run is read_only:\n%s", p)
		}
	})

	t.Run("a read_only agent that only reads runs on", func(t *testing.T) {
		h := h.in(t)
		wd := h.workdir("ro-reader")
		writeFile(t, wd, "notes.txt", "keep me\n")
		script, _ := agent(t, `cat >/dev/null; wc -l notes.txt; echo "iteration $HOMEWORK_ITERATION read it"`)
		cfg := commandRun(script, wd)
		cfg.Permissions.WriteMode = spec.WriteReadOnly
		cfg.Budgets.MaxIterations = 2
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason.Type != spec.StopMaxIterations {
			t.Fatalf("run is %s (%+v), want stopped at max_iterations\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
	})

	t.Run("an approve_plan run plans first, waits for approval with the plan, and works after the answer", func(t *testing.T) {
		h := h.in(t)
		wd := h.workdir("plan")
		script, state := agent(t, countInvocation+savePrompt+`if grep -q "planning only" "$STATE/prompt-$n.txt"; then
  printf '1. Write done.txt\n2. Finish\n' > .homework/plan.md
  echo "Planned. <promise>COMPLETE</promise>"
else
  echo done > done.txt
  echo "Did the plan."
  echo "<promise>COMPLETE</promise>"
fi`)
		cfg := commandRun(script, wd, spec.CheckSpec{Type: spec.CheckDocumentExists, Name: "done", Path: "done.txt"})
		cfg.Permissions.WriteMode = spec.WriteApprovePlan
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusWaiting || run.Waiting == nil || run.Waiting.Reason != "approve_plan" ||
			len(run.Waiting.Questions) != 1 || !strings.Contains(run.Waiting.Questions[0], "1. Write done.txt") {
			t.Fatalf("run is %s waiting %+v; want waiting for approve_plan with the plan\n%s", run.Status, run.Waiting, h.eventDump(run.ID))
		}
		if _, err := h.eng.Respond(h.ctx, h.admin.ID, run.ID, []string{"Approved."}); err != nil {
			t.Fatal(err)
		}
		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted || run.Metrics.Iterations != 2 {
			t.Fatalf("run is %s after %d iterations, want completed after 2\n%s", run.Status, run.Metrics.Iterations, h.eventDump(run.ID))
		}
		p2 := readFile(t, filepath.Join(state, "prompt-2.txt"))
		if strings.Contains(p2, "planning only") || !strings.Contains(p2, "approved the plan") || !strings.Contains(p2, "Approved.") {
			t.Errorf("prompt 2:\n%s", p2)
		}
	})

	t.Run("an approve_plan agent that changes files while planning is stopped", func(t *testing.T) {
		h := h.in(t)
		wd := h.workdir("plan-writer")
		script, _ := agent(t, `cat >/dev/null; echo eager > done.txt; echo "Did it already."`)
		cfg := commandRun(script, wd)
		cfg.Permissions.WriteMode = spec.WriteApprovePlan
		run := h.settled(h.create(cfg).ID)
		if run.Status != spec.StatusStopped || run.StopReason.Type != agentcmd.StopReadOnlyViolation {
			t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
	})
}

func TestCommandRunReportSaysWhatChanged(t *testing.T) {
	h := newE2E(t, e2eConfig{})
	wd := h.workdir("report")
	initRepo(t, wd)
	writeFile(t, wd, "old.txt", "old\n")
	git(t, wd, "add", "-A")
	git(t, wd, "commit", "-q", "-m", "add old")
	script, _ := agent(t, countInvocation+`cat >/dev/null
if [ "$n" = 1 ]; then
  echo "hello again" >> README.md
  echo new > new.txt
  echo "Edited README and added new.txt."
else
  rm old.txt
  git -c user.name=A -c user.email=a@example.com -c commit.gpgsign=false commit -qam "agent: drop old.txt"
  echo "Removed old.txt and committed."
  echo "<promise>COMPLETE</promise>"
fi`)
	cfg := commandRun(script, wd)
	cfg.Agent.CommitEach = true
	run := h.settled(h.create(cfg).ID)
	if run.Status != spec.StatusCompleted {
		t.Fatalf("run is %s (%+v)\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
	}
	h.stop()
	if files := git(t, wd, "ls-files"); strings.Contains(files, ".homework/runs") {
		t.Errorf("the run's state was committed:\n%s", files)
	}
	if run.Report == nil {
		t.Fatal("the run has no report")
	}
	rep := *run.Report
	paths := func(refs []spec.Ref, typ string) []string {
		var out []string
		for _, r := range refs {
			if r.Type == typ {
				out = append(out, r.Path+":"+r.Title)
			}
		}
		return out
	}
	if got := paths(rep.WhatChanged.Created, "file"); !slices.Equal(got, []string{"new.txt:created"}) {
		t.Errorf("created files %v", got)
	}
	if got := paths(rep.WhatChanged.Updated, "file"); !slices.Equal(got, []string{"README.md:modified", "old.txt:deleted"}) {
		t.Errorf("updated files %v", got)
	}
	var commits []string
	for _, r := range rep.WhatChanged.Created {
		if r.Type == "commit" {
			commits = append(commits, r.Title)
		}
	}
	if !slices.Equal(commits, []string{"agent: drop old.txt"}) {
		t.Errorf("commits %v", commits)
	}
	for _, s := range []string{"> Removed old.txt and committed.", "Created (1): new.txt", "Modified (1): README.md", "Deleted (1): old.txt",
		"agent: drop old.txt", "homework: run " + run.ID + " iteration 1", "files changed"} {
		if !strings.Contains(rep.Summary, s) {
			t.Errorf("report summary lacks %q:\n%s", s, rep.Summary)
		}
	}
}
