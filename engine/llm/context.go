package llm

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"homework/engine/spec"
)

// buildContext assembles the iteration's bounded context from st, the
// run's documents and checklist.
func (it *iteration) buildContext(st runState) string {
	e, in, cfg, tasks := it.e, it.in, it.cfg, st.tasks
	var b strings.Builder
	section := func(title, body string, size int) {
		body = strings.TrimSpace(body)
		if body == "" {
			return
		}
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", title, truncate(body, size))
	}
	section("Objective", cfg.Objective, 4000)
	section("Mode and permissions", it.modeText(), 3000)
	if f := in.Feedback; f != nil {
		section("Gate feedback (why you are continuing)", feedbackText(f), 6000)
	}
	if len(in.Inbox) > 0 {
		section("New from the person", inboxText(in.Inbox), 6000)
	}
	if len(tasks) > 0 {
		section("Checklist", formatTasks(tasks, 60, 4000), 4500)
	} else {
		section("Checklist", "(empty — add tasks with tasks_add)", 200)
	}
	if len(in.Summaries) > 0 {
		section("Recent iteration summaries (newest last)", summariesText(in.Summaries), 3000)
	}
	ws := readWorkspace(st.docs)
	if ws.plan != "" && !it.planPhase {
		section("Plan (plan.md)", ws.plan, 3000)
	}
	section("Scratchpad (most recent notes)", tail(ws.scratchpad, 4000), 4100)
	section("Workspace documents", ws.list, 3000)

	out := b.String()
	if bound := e.opts.MaxContextChars; len(out) > bound {
		out = truncate(out, bound-60) + "\n\n[context cut to its size bound]"
	}
	return out
}

// modeText tells the model the iteration's number, mode, write mode, bound
// and completion checks.
func (it *iteration) modeText() string {
	in, cfg := it.in, it.cfg
	var mode strings.Builder
	fmt.Fprintf(&mode, "This is iteration %d. Mode: %s. Write mode: %s.\n", in.Iteration, orDefault(cfg.Mode, spec.ModeAuto), orDefault(cfg.Permissions.WriteMode, spec.WriteAutopilot))
	fmt.Fprintf(&mode, "You have at most %d tool calls in this iteration.\n", it.toolCallLimit())
	switch {
	case it.planPhase:
		mode.WriteString("The person must approve a plan before the work starts. In this iteration: research as needed, write the plan to plan.md (steps, deliverables, how completion will be verified, proposed tasks), then call report_status with exit_signal false. The checklist and other documents cannot be changed until the plan is approved.\n")
	case it.readOnly:
		mode.WriteString("This run is read_only (planning): you may read, search, append to the scratchpad and write notes under notes/ only. The checklist and other documents cannot be changed.\n")
	case cfg.Permissions.WriteMode == spec.WriteApprovePlan:
		mode.WriteString("The plan in plan.md was reviewed by the person (see their answer below); follow it.\n")
	}
	if cfg.Mode == spec.ModeInteractive {
		mode.WriteString("The person reviews the run after each iteration.\n")
	}
	if len(cfg.Completion.Checks) > 0 {
		mode.WriteString("Completion is verified by these checks:\n")
		for _, c := range cfg.Completion.Checks {
			fmt.Fprintf(&mode, "- %s (%s)%s\n", c.DisplayName(), c.Type, checkDetail(c))
		}
	}
	return mode.String()
}

// feedbackText tells the model why the gate let the run continue: its
// reasons, up to six failing checks, the remaining work and open questions.
func feedbackText(f *spec.Feedback) string {
	var fb strings.Builder
	fmt.Fprintf(&fb, "After the previous iteration the platform decided: %s.\n", f.Decision)
	for _, r := range f.Reasons {
		fmt.Fprintf(&fb, "- %s\n", truncate(r, 500))
	}
	for i, c := range f.FailingChecks {
		if i == 6 {
			fmt.Fprintf(&fb, "… %d more failing checks\n", len(f.FailingChecks)-i)
			break
		}
		fmt.Fprintf(&fb, "\nFailing check %q (%s): %s\n", c.Name, c.Type, truncate(c.Message, 500))
		if c.OutputTail != "" {
			fmt.Fprintf(&fb, "Output tail:\n```\n%s\n```\n", tail(c.OutputTail, 800))
		}
	}
	if len(f.RemainingWork) > 0 {
		fb.WriteString("\nRemaining work:\n")
		for _, w := range f.RemainingWork {
			fmt.Fprintf(&fb, "- %s\n", truncate(w, 300))
		}
	}
	if len(f.Questions) > 0 {
		fb.WriteString("\nYou asked the person:\n")
		for _, q := range f.Questions {
			fmt.Fprintf(&fb, "- %s\n", truncate(q, 300))
		}
	}
	return fb.String()
}

// inboxText lists the person's new answers and messages.
func inboxText(inbox []spec.InboxItem) string {
	var ib strings.Builder
	for _, m := range inbox {
		label := "Message"
		if m.Kind == "answer" {
			label = "Answer"
		}
		fmt.Fprintf(&ib, "%s from the person:\n%s\n\n", label, truncate(m.Body, 2000))
	}
	return ib.String()
}

// summariesText lists the last iteration summaries, newest last, one line
// each.
func summariesText(summaries []string) string {
	var sb strings.Builder
	for i, s := range summaries {
		fmt.Fprintf(&sb, "- %d iteration(s) ago: %s\n", len(summaries)-i, truncate(oneLine(s), 800))
	}
	return sb.String()
}

// workspaceView is what the context shows of the workspace.
type workspaceView struct {
	plan, scratchpad string
	list             string // up to 60 documents, leaving out folders, summaries and archives
}

// readWorkspace picks the plan and the scratchpad out of docs and lists
// the documents.
func readWorkspace(docs []*spec.Document) workspaceView {
	var ws workspaceView
	var list strings.Builder
	n := 0
	for _, d := range docs {
		switch d.Path {
		case scratchpadPath:
			ws.scratchpad = d.Content
		case planPath:
			ws.plan = d.Content
		}
		if d.Path == "" || d.Kind == spec.DocFolder || strings.HasPrefix(d.Path, iterationsFolder+"/") || strings.HasPrefix(d.Path, scratchpadFolder+"/") {
			continue
		}
		if n++; n <= 60 {
			fmt.Fprintf(&list, "- %s (%s, %d chars) %s\n", d.Path, d.Kind, len(d.Content), truncate(d.Title, 100))
		}
	}
	if n > 60 {
		fmt.Fprintf(&list, "… %d more; use workspace_list\n", n-60)
	}
	ws.list = list.String()
	return ws
}

func checkDetail(c spec.CheckSpec) string {
	switch {
	case c.Path != "":
		return ": " + c.Path
	case c.Target != "":
		return fmt.Sprintf(": /%s/ in %s", c.Pattern, c.Target)
	case len(c.Argv) > 0:
		return ": " + truncate(strings.Join(c.Argv, " "), 200)
	}
	return ""
}

// tail returns the last n bytes of s on a rune boundary.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return "…" + s[start:]
}
