package llm_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"homework/engine/llm"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

// TestLLMRunsThroughTheEngine runs LLM runs end to end: a real engine over a
// real SQLite file, the LLM executor, and a scripted OpenAI-compatible
// endpoint. Assertions are on what the store holds afterwards.
func TestLLMRunsThroughTheEngine(t *testing.T) {
	t.Run("a run that researches, writes documents and updates tasks completes with a true report", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{},
			// Iteration 1: research, write notes, plan the checklist.
			tools(call("workspace_search", map[string]any{"query": "sqlite driver"}), call("workspace_list", map[string]any{})),
			tools(call("workspace_write", map[string]any{"path": "notes/drivers.md", "content": "# Drivers\n\nmodernc.org/sqlite, mattn/go-sqlite3 and zombiezen.com/go/sqlite."}),
				call("tasks_add", map[string]any{"title": "Compare drivers"}),
				call("tasks_add", map[string]any{"title": "Write recommendation"})),
			status(false, "Listed the drivers and planned the work."),
			// Iteration 2: write the deliverable, finish the checklist, complete.
			tools(call("workspace_read", map[string]any{"path": "notes/drivers.md"}),
				call("workspace_write", map[string]any{"path": "report.md", "content": "# Recommendation\n\nUse modernc.org/sqlite: no cgo."}),
				call("tasks_update", map[string]any{"id": "Compare drivers", "status": "done", "passes": true}),
				call("tasks_update", map[string]any{"id": "Write recommendation", "status": "done", "passes": true}),
				call("append_scratchpad", map[string]any{"text": "Wrote the recommendation to report.md."})),
			status(true, "Wrote the recommendation.", "report.md recommends modernc.org/sqlite", "both tasks are done"),
		)
		const narrative = "The run compared three SQLite drivers and recommended modernc.org/sqlite in report.md."
		narrate(h.srv, narrative)

		run := h.create(spec.Config{})
		run = h.waitStatus(run.ID, spec.StatusCompleted)
		if run.StopReason == nil || run.StopReason.Type != "completed" {
			t.Errorf("stop reason = %+v", run.StopReason)
		}
		if h.srv.Remaining() != 0 {
			t.Errorf("%d scripted replies unused", h.srv.Remaining())
		}
		its := h.iterations(run.ID)
		if len(its) != 2 || its[0].Status != spec.IterSucceeded || its[1].Status != spec.IterSucceeded {
			t.Fatalf("iterations = %+v", its)
		}

		// what_changed.created is exactly what the iterations created: the
		// tools' documents and tasks and the platform's iteration
		// summaries, with the ids of the stored rows.
		rep := h.report(run)
		wantCreated := map[string]string{}
		for _, p := range []string{"notes/drivers.md", "report.md", "iterations/001-summary.md", "iterations/002-summary.md"} {
			wantCreated["document:"+p] = h.doc(run.ID, p).ID
		}
		tasks := h.tasks(run.ID)
		if len(tasks) != 2 {
			t.Fatalf("tasks = %+v", tasks)
		}
		for _, task := range tasks {
			if task.Status != spec.TaskDone || !task.Passes {
				t.Errorf("task %q is %s passes=%v", task.Title, task.Status, task.Passes)
			}
			wantCreated["task:"+task.Title] = task.ID
		}
		gotCreated := map[string]string{}
		for _, r := range rep.WhatChanged.Created {
			key := r.Type + ":" + r.Path
			if r.Type == "task" {
				key = r.Type + ":" + r.Title
			}
			if _, dup := gotCreated[key]; dup {
				t.Errorf("what_changed.created lists %s twice", key)
			}
			gotCreated[key] = r.ID
		}
		if !mapsEqual(gotCreated, wantCreated) {
			t.Errorf("what_changed.created = %v\nwant %v", gotCreated, wantCreated)
		}
		if !slices.ContainsFunc(rep.WhatChanged.Updated, func(r spec.Ref) bool { return r.Path == "scratchpad.md" }) {
			t.Errorf("what_changed.updated = %+v, want scratchpad.md", rep.WhatChanged.Updated)
		}
		for _, r := range rep.WhatChanged.Updated {
			if r.Type == "task" {
				t.Errorf("task %q was created by the run and must not be listed as updated", r.Title)
			}
		}

		// artifacts.documents is the run's whole workspace.
		var wantDocs, gotDocs []string
		for _, d := range h.docs(run.ID) {
			wantDocs = append(wantDocs, d.ID)
		}
		for _, r := range rep.Artifacts.Documents {
			gotDocs = append(gotDocs, r.ID)
		}
		slices.Sort(wantDocs)
		slices.Sort(gotDocs)
		if !slices.Equal(gotDocs, wantDocs) {
			t.Errorf("artifacts.documents = %v, want %v", gotDocs, wantDocs)
		}
		if len(rep.Artifacts.Tasks) != 2 {
			t.Errorf("artifacts.tasks = %+v", rep.Artifacts.Tasks)
		}

		// The summary is the summarizer's narrative, its last call.
		reqs := h.srv.Requests()
		if last := reqs[len(reqs)-1]; roleOf(last) != reqSummarizer {
			t.Errorf("the last request came from the %s, want the summarizer", roleOf(last))
		}
		if rep.Summary != narrative || rep.NarrativeError != "" {
			t.Errorf("summary = %q (error %q), want the narrative", rep.Summary, rep.NarrativeError)
		}
		if rep.Status != spec.StatusCompleted || rep.StoppingReason.Type != "completed" {
			t.Errorf("report status %q stopping %+v", rep.Status, rep.StoppingReason)
		}

		// Usage: every call is a row; the run's totals are their sum and
		// the sum over iterations; the report repeats them.
		calls := h.calls(run.ID)
		var roles []string
		for _, c := range calls {
			roles = append(roles, c.Role)
			if !c.Priced || c.CostUSD <= 0 || c.Model != "gpt-4o-mini" {
				t.Errorf("call %+v: want a priced gpt-4o-mini call", c)
			}
		}
		if want := []string{"planner", "planner", "planner", "planner", "planner", "summarizer"}; !slices.Equal(roles, want) {
			t.Errorf("llm_calls roles = %v, want %v", roles, want)
		}
		h.checkUsageAddsUp(run.ID)
		m := run.Metrics
		if m.Iterations != 2 || m.LLMCalls != 6 || m.TokensTotal != 6*120 || m.ToolCallsTotal != 12 {
			t.Errorf("metrics = %+v", m)
		}
		if rm := rep.Metrics; rm.Iterations != 2 || rm.TotalTokens != m.TokensTotal || !near(rm.TotalCostUSD, m.CostTotalUSD) || rm.ToolCalls != 12 {
			t.Errorf("report metrics = %+v, run metrics %+v", rm, m)
		}

		evs := h.events(run.ID)
		if n := countEvents(evs, "llm_call"); n != 6 {
			t.Errorf("%d llm_call events, want 6", n)
		}
		if n := countEvents(evs, "tool_call"); n != 12 {
			t.Errorf("%d tool_call events, want 12", n)
		}
		checkToolEventOrder(t, evs)
		if evs[len(evs)-1].Type != "run_completed" {
			t.Errorf("last event is %s", evs[len(evs)-1].Type)
		}
		if n := h.notification(run.ID, "run_completed"); n.Title != "Homework complete" {
			t.Errorf("notification = %+v", n)
		}
	})

	t.Run("the summarizer is told about the final iteration", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{},
			status(false, "Planned."),
			tools(call("workspace_write", map[string]any{"path": "report.md", "content": "# Recommendation\n\nUse modernc.org/sqlite."})),
			status(true, "Wrote the recommendation.", "report.md"),
		)
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{}).ID, spec.StatusCompleted)
		sum := requestsOf(h.srv, reqSummarizer)
		if len(sum) != 1 {
			t.Fatalf("%d summarizer requests", len(sum))
		}
		var told spec.Report
		if err := json.Unmarshal([]byte(sum[0].Last()), &told); err != nil {
			t.Fatalf("the summarizer's input is not a report: %v", err)
		}
		if told.Metrics.Iterations != run.Metrics.Iterations {
			t.Errorf("the summarizer was told of %d iterations; the run had %d", told.Metrics.Iterations, run.Metrics.Iterations)
		}
		if !slices.ContainsFunc(told.WhatChanged.Created, func(r spec.Ref) bool { return r.Path == "report.md" }) {
			t.Errorf("the summarizer was not told that report.md was created: %+v", told.WhatChanged.Created)
		}
	})

	t.Run("a premature completion claim is blocked by a failing check and the next iteration sees why", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{},
			status(true, "All done.", "I am confident"),
			tools(call("workspace_write", map[string]any{"path": "report.md", "content": "# Verdict\n\nWe recommend modernc.org/sqlite."})),
			status(true, "Wrote report.md.", "report.md contains the recommendation"),
		)
		narrate(h.srv, "A narrative.")
		run := h.create(spec.Config{Completion: spec.Completion{Checks: []spec.CheckSpec{
			{Type: spec.CheckContentPattern, Name: "recommendation written", Pattern: "(?i)recommend", Target: "document:report.md"},
			{Type: spec.CheckDocumentExists, Name: "report exists", Path: "report.md"},
		}}})
		run = h.waitStatus(run.ID, spec.StatusCompleted)

		gates := h.eventsOf(run.ID, "gate_decision")
		if len(gates) != 2 {
			t.Fatalf("gate decisions = %v", gates)
		}
		first := gates[0]
		reasons := fmt.Sprint(first["reasons"])
		if first["decision"] != spec.DecisionContinue || first["false_completion"] != true ||
			!strings.Contains(reasons, `check "recommendation written" failed`) || !strings.Contains(reasons, `check "report exists" failed`) {
			t.Errorf("first gate decision = %v", first)
		}
		if gates[1]["decision"] != spec.DecisionComplete {
			t.Errorf("second gate decision = %v", gates[1])
		}
		if run.Metrics.FalseCompletionsBlocked != 1 {
			t.Errorf("false_completions_blocked = %d, want 1", run.Metrics.FalseCompletionsBlocked)
		}
		if rep := h.report(run); rep.Metrics.FalseCompletionsBlocked != 1 {
			t.Errorf("report false_completions_blocked = %d", rep.Metrics.FalseCompletionsBlocked)
		}

		planner := requestsOf(h.srv, reqPlanner)
		if len(planner) != 3 {
			t.Fatalf("%d planner requests, want 3", len(planner))
		}
		if p := userPrompt(planner[0]); strings.Contains(p, "Gate feedback") {
			t.Errorf("the first iteration has gate feedback:\n%s", p)
		}
		p := userPrompt(planner[1])
		for _, want := range []string{"Gate feedback", "completion claim refused", `Failing check "recommendation written" (content_pattern)`,
			`Failing check "report exists" (document_exists): Document report.md does not exist.`} {
			if !strings.Contains(p, want) {
				t.Errorf("the second iteration's prompt lacks %q:\n%s", want, p)
			}
		}
		h.checkUsageAddsUp(run.ID)
		h.events(run.ID)
	})

	t.Run("ask_user waits for the person and the answer reaches the next iteration", func(t *testing.T) {
		t.Parallel()
		const question = "Must the driver build without cgo?"
		h := newE2E(t, e2eOptions{},
			tools(call("ask_user", map[string]any{"questions": []string{question}, "context": "The choice depends on cgo."})),
		)
		narrate(h.srv, "A narrative.")
		run := h.create(spec.Config{})
		run = h.waitStatus(run.ID, spec.StatusWaiting)
		if run.Waiting == nil || run.Waiting.Reason != "needs_input" || !slices.Equal(run.Waiting.Questions, []string{question}) {
			t.Fatalf("waiting = %+v", run.Waiting)
		}
		if n := h.notification(run.ID, "run_waiting_on_user"); !strings.HasSuffix(n.Message, " — "+question) {
			t.Errorf("notification message = %q", n.Message)
		}

		const answer = "Yes: it must cross-compile without cgo."
		h.srv.Push(status(true, "Recommended the pure-Go driver.", "the answer rules out mattn/go-sqlite3"))
		if _, err := h.eng.Respond(h.ctx, h.user.ID, run.ID, []string{answer}); err != nil {
			t.Fatal(err)
		}
		run = h.waitStatus(run.ID, spec.StatusCompleted)
		planner := requestsOf(h.srv, reqPlanner)
		if len(planner) != 2 {
			t.Fatalf("%d planner requests, want 2", len(planner))
		}
		p := userPrompt(planner[1])
		for _, want := range []string{"Answer from the person:\n" + answer, "You asked the person:\n- " + question} {
			if !strings.Contains(p, want) {
				t.Errorf("the next iteration's prompt lacks %q:\n%s", want, p)
			}
		}
		if strings.Contains(userPrompt(planner[0]), answer) {
			t.Error("the first prompt already had the answer")
		}
		evs := h.events(run.ID)
		if countEvents(evs, "user_response") != 1 || countEvents(evs, "run_waiting_on_user") != 1 {
			t.Errorf("events: %v", eventTypes(evs))
		}
		inbox, err := h.db.ListInbox(h.ctx, h.user.ID, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(inbox) != 1 || inbox[0].ConsumedIteration != 2 {
			t.Errorf("inbox = %+v", inbox)
		}
	})

	t.Run("delegate fans out parallel executor branches whose usage is summed into the run", func(t *testing.T) {
		t.Parallel()
		branches := []string{"modernc", "mattn", "zombiezen"}
		var tasks []map[string]any
		for _, id := range branches {
			tasks = append(tasks, map[string]any{"id": id, "title": "Assess " + id, "instructions": "Assess the " + id + " driver."})
		}
		h := newE2E(t, e2eOptions{},
			tools(call("delegate", map[string]any{"tasks": tasks})),
			status(true, "The branches assessed every driver.", "branches/*/findings.md"),
		)
		narrate(h.srv, "A narrative.")
		all := newBarrier(len(branches), 10*time.Second)
		h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
			if roleOf(r) != reqExecutor {
				return llmtest.Reply{}, false
			}
			id := ""
			for _, b := range branches {
				if strings.Contains(r.System(), "(branch "+b+")") {
					id = b
				}
			}
			if len(r.Messages) == 2 {
				// Hold each branch's first call until all are in flight.
				all.wait()
				return tools(call("workspace_write", map[string]any{"path": "findings.md", "content": "# " + id + "\n\nFindings about " + id + "."})), true
			}
			return tools(call("finish", map[string]any{"result": id + " is fine; see findings.md"})), true
		})
		run := h.create(spec.Config{Models: &spec.Models{Executor: "gpt-4.1-nano"}})
		run = h.waitStatus(run.ID, spec.StatusCompleted)

		if n := h.srv.MaxConcurrent(); n != len(branches) {
			t.Errorf("the endpoint saw at most %d requests at once, want %d", n, len(branches))
		}
		for _, id := range branches {
			if d := h.doc(run.ID, "branches/"+id); d.Kind != spec.DocBranch {
				t.Errorf("branches/%s is a %s", id, d.Kind)
			}
			if d := h.doc(run.ID, "branches/"+id+"/findings.md"); !strings.Contains(d.Content, "Findings about "+id) {
				t.Errorf("branches/%s/findings.md = %q", id, d.Content)
			}
			if d := h.doc(run.ID, "branches/"+id+"/result.md"); !strings.Contains(d.Content, id+" is fine") {
				t.Errorf("branches/%s/result.md = %q", id, d.Content)
			}
		}
		// The planner saw every branch's report.
		planner := requestsOf(h.srv, reqPlanner)
		if len(planner) != 2 {
			t.Fatalf("%d planner requests", len(planner))
		}
		for _, id := range branches {
			if !strings.Contains(planner[1].Last(), "### Branch "+id) {
				t.Errorf("the planner's delegate result lacks branch %s:\n%s", id, planner[1].Last())
			}
		}

		var executor int
		for _, c := range h.calls(run.ID) {
			if c.Role == llm.RoleExecutor {
				executor++
				if c.Model != "gpt-4.1-nano" || !c.Priced {
					t.Errorf("executor call %+v", c)
				}
			}
		}
		if executor != 2*len(branches) {
			t.Errorf("%d executor calls recorded, want %d", executor, 2*len(branches))
		}
		run, _ = h.db.FindRun(h.ctx, h.user.ID, run.ID)
		if u := run.Metrics.ByModel["gpt-4.1-nano"]; u.Calls != 2*len(branches) || u.PromptTokens != int64(2*len(branches)*100) {
			t.Errorf("by_model[gpt-4.1-nano] = %+v", u)
		}
		// 1 delegate + 3×(write + finish) + report_status.
		if run.Metrics.ToolCallsTotal != 8 {
			t.Errorf("tool calls = %d, want 8", run.Metrics.ToolCallsTotal)
		}
		h.checkUsageAddsUp(run.ID)
		h.events(run.ID)
	})

	t.Run("invalid tool arguments are repaired by a repair call", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{},
			tools(llmtest.Call{Name: "workspace_write", Args: `{"path":"notes/x.md","body":"oops"}`}),
			llmtest.Text("```json\n{\"path\":\"notes/x.md\",\"content\":\"# Fixed\\n\\nrepaired\"}\n```"),
			status(true, "Wrote notes/x.md.", "notes/x.md"),
		)
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{}).ID, spec.StatusCompleted)

		if d := h.doc(run.ID, "notes/x.md"); !strings.Contains(d.Content, "repaired") {
			t.Errorf("notes/x.md = %q", d.Content)
		}
		var roles []string
		for _, c := range h.calls(run.ID) {
			roles = append(roles, c.Role)
		}
		if want := []string{"planner", "repair", "planner", "summarizer"}; !slices.Equal(roles, want) {
			t.Errorf("roles = %v, want %v", roles, want)
		}
		results := h.eventsOf(run.ID, "tool_result")
		if len(results) == 0 || results[0]["repaired"] != true || results[0]["ok"] != true {
			t.Errorf("tool results = %v", results)
		}
		if its := h.iterations(run.ID); len(its) != 1 || its[0].Error != "" || its[0].Status != spec.IterSucceeded {
			t.Errorf("iterations = %+v", its)
		}
		h.checkUsageAddsUp(run.ID)
	})

	t.Run("arguments still invalid after two repairs fail the call and record an error fingerprint", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{},
			tools(llmtest.Call{Name: "workspace_write", Args: `{"path":"notes/x.md","body":"oops"}`}),
			llmtest.Text("I cannot do that."),
			llmtest.Text(`{"path":"notes/x.md"}`),
			status(false, "The write failed.", "none"),
		)
		narrate(h.srv, "A narrative.")
		run := h.create(spec.Config{Budgets: spec.Budgets{MaxIterations: 1}})
		run = h.waitStatus(run.ID, spec.StatusStopped)
		if run.StopReason == nil || run.StopReason.Type != "max_iterations" {
			t.Errorf("stop reason = %+v", run.StopReason)
		}
		its := h.iterations(run.ID)
		if len(its) != 1 {
			t.Fatalf("iterations = %+v", its)
		}
		it := its[0]
		if it.Status != spec.IterFailed || !strings.HasPrefix(it.ErrorFingerprint, "tool:workspace_write:invalid_arguments:") ||
			!strings.Contains(it.Error, "workspace_write") {
			t.Errorf("iteration: status %s, error %q, fingerprint %q", it.Status, it.Error, it.ErrorFingerprint)
		}
		var repairs int
		for _, c := range h.calls(run.ID) {
			if c.Role == llm.RoleRepair {
				repairs++
			}
		}
		if repairs != 2 {
			t.Errorf("%d repair calls, want 2", repairs)
		}
		planner := requestsOf(h.srv, reqPlanner)
		if len(planner) != 2 || !strings.Contains(planner[1].Last(), "error: invalid arguments for workspace_write") {
			t.Errorf("the model was not told its arguments were invalid: %q", planner[len(planner)-1].Last())
		}
		if _, err := h.db.FindRunDocumentByPath(h.ctx, h.user.ID, run.ID, "notes/x.md"); spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Errorf("notes/x.md was written: %v", err)
		}
		h.checkUsageAddsUp(run.ID)
		h.events(run.ID)
	})

	t.Run("a 429 with Retry-After is retried after the delay and the run completes", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{},
			llmtest.Reply{Status: 429, Content: "Rate limit reached", Header: map[string]string{"Retry-After": "1"}},
			status(true, "Done.", "evidence"),
		)
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{}).ID, spec.StatusCompleted)
		planner := requestsOf(h.srv, reqPlanner)
		if len(planner) != 2 {
			t.Fatalf("%d planner requests, want 2", len(planner))
		}
		if gap := planner[1].At.Sub(planner[0].At); gap < 900*time.Millisecond {
			t.Errorf("retried after %s; Retry-After asked for 1s", gap)
		}
		calls := h.calls(run.ID)
		if len(calls) != 3 || !strings.Contains(calls[0].Error, "429") || calls[1].Error != "" {
			t.Errorf("calls = %+v", calls)
		}
		if its := h.iterations(run.ID); len(its) != 1 || its[0].Error != "" {
			t.Errorf("iterations = %+v", its)
		}
		h.checkUsageAddsUp(run.ID)
		h.events(run.ID)
	})

	t.Run("a 401 stops the run after one iteration without retrying", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{})
		h.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
			return llmtest.Error(401, "Incorrect API key provided: test."), true
		})
		run := h.waitStatus(h.create(spec.Config{}).ID, spec.StatusStopped)
		if run.StopReason == nil || run.StopReason.Type != "error" || !strings.Contains(run.StopReason.Detail, "API key") {
			t.Errorf("stop reason = %+v", run.StopReason)
		}
		if its := h.iterations(run.ID); len(its) != 1 || its[0].Status != spec.IterFailed || !strings.Contains(its[0].Error, "401") {
			t.Errorf("iterations = %+v", its)
		}
		// One planner call, not retried, and no summarizer call against an
		// endpoint that refused the key.
		if n := len(requestsOf(h.srv, reqPlanner)); n != 1 {
			t.Errorf("%d planner requests, want 1", n)
		}
		if n := len(h.srv.Requests()); n != 1 {
			t.Errorf("%d requests in all, want 1", n)
		}
		rep := h.report(run)
		if rep.Summary != "" || rep.NarrativeError == "" {
			t.Errorf("summary %q, narrative error %q", rep.Summary, rep.NarrativeError)
		}
		if n := h.notification(run.ID, "run_stopped"); !strings.Contains(n.Message, "API key") {
			t.Errorf("notification message = %q", n.Message)
		}
		h.checkUsageAddsUp(run.ID)
		h.events(run.ID)
	})

	t.Run("a malformed or empty response fails the iteration cleanly and the run goes on", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{llm: func(o *llm.Options) { o.RetryMax = 1 }},
			llmtest.Reply{Body: `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assis`},
			llmtest.Reply{NoChoices: true},
			status(true, "Done.", "evidence"),
		)
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{}).ID, spec.StatusCompleted)
		its := h.iterations(run.ID)
		if len(its) != 2 {
			t.Fatalf("iterations = %+v", its)
		}
		if it := its[0]; it.Status != spec.IterFailed || !strings.Contains(it.Error, "model endpoint") || strings.Contains(it.Error, "panic") ||
			it.ErrorFingerprint != "model:no_choices" {
			t.Errorf("first iteration: status %s, error %q, fingerprint %q", it.Status, it.Error, it.ErrorFingerprint)
		}
		if its[1].Status != spec.IterSucceeded {
			t.Errorf("second iteration = %+v", its[1])
		}
		gates := h.eventsOf(run.ID, "gate_decision")
		if len(gates) != 2 || gates[0]["decision"] != spec.DecisionContinue || !strings.Contains(fmt.Sprint(gates[0]["reasons"]), "iteration error: the model endpoint") {
			t.Errorf("gate decisions = %v", gates)
		}
		calls := h.calls(run.ID)
		if len(calls) < 2 || !strings.Contains(calls[0].Error, "model endpoint") || !strings.Contains(calls[1].Error, "no choices") {
			t.Errorf("calls = %+v", calls)
		}
		h.checkUsageAddsUp(run.ID)
		h.events(run.ID)
	})

	t.Run("a cost budget stops a run using a priced model", func(t *testing.T) {
		t.Parallel()
		// gpt-4o: $2.50 in, $10 out per million tokens; each reply costs $0.35.
		costly := func(r llmtest.Reply) llmtest.Reply { r.PromptTokens, r.CompletionTokens = 100_000, 10_000; return r }
		h := newE2E(t, e2eOptions{},
			costly(status(false, "Researched part one.")),
			costly(tools(call("workspace_write", map[string]any{"path": "notes/part2.md", "content": "# Part two"}))),
		)
		narrate(h.srv, "A narrative.")
		// on_forecast off: the cut during the iteration is what stops it.
		run := h.create(spec.Config{Model: "gpt-4o", Budgets: spec.Budgets{MaxCostUSD: 0.5, OnForecast: spec.ForecastOff}})
		run = h.waitStatus(run.ID, spec.StatusStopped)
		if run.StopReason == nil || run.StopReason.Type != "budget_cost" {
			t.Fatalf("stop reason = %+v", run.StopReason)
		}
		// The second iteration's first call passes the budget; the
		// iteration ends right after it, without a further call.
		if run.Metrics.Iterations != 2 || run.Metrics.LLMCalls != 2 || !near(run.Metrics.CostTotalUSD, 0.70) {
			t.Errorf("metrics = %+v", run.Metrics)
		}
		if rep := h.report(run); rep.StoppingReason.Type != "budget_cost" || rep.Metrics.TotalCostUSD <= 0 {
			t.Errorf("report stopping %+v metrics %+v", rep.StoppingReason, rep.Metrics)
		}
		h.checkUsageAddsUp(run.ID)
		h.events(run.ID)
	})

	t.Run("an unpriced model is recorded as unpriced, never as free", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{}, status(true, "Done.", "evidence"))
		narrate(h.srv, "A narrative.")
		run := h.waitStatus(h.create(spec.Config{Model: "mystery-model"}).ID, spec.StatusCompleted)
		calls := h.calls(run.ID)
		if len(calls) != 2 {
			t.Fatalf("calls = %+v", calls)
		}
		for _, c := range calls {
			if c.Priced || c.CostUSD != 0 || c.Model != "mystery-model" {
				t.Errorf("call %+v: want unpriced mystery-model at $0", c)
			}
		}
		m := run.Metrics
		if m.UnpricedCalls != 2 || m.CostTotalUSD != 0 || !m.ByModel["mystery-model"].Unpriced || m.ByModel["mystery-model"].Calls != 2 {
			t.Errorf("metrics = %+v", m)
		}
		if rep := h.report(run); rep.Metrics.UnpricedCalls != 2 {
			t.Errorf("report metrics = %+v", rep.Metrics)
		}
		for _, e := range h.eventsOf(run.ID, "llm_call") {
			if e["priced"] != false {
				t.Errorf("llm_call event %v", e)
			}
		}
		h.checkUsageAddsUp(run.ID)
	})

	t.Run("without an endpoint an LLM run is refused with how to configure one", func(t *testing.T) {
		t.Parallel()
		h := newE2E(t, e2eOptions{noEndpoint: true})
		_, err := h.eng.CreateRun(h.ctx, h.user, spec.Config{Objective: "anything", Executor: spec.ExecutorLLM})
		if spec.ErrorCode(err) != spec.EUNAVAILABLE {
			t.Fatalf("err = %v, want %s", err, spec.EUNAVAILABLE)
		}
		if msg := spec.ErrorMessage(err); !strings.Contains(msg, "HOMEWORK_LLM_BASE_URL") || !strings.Contains(msg, "HOMEWORK_LLM_API_KEY") {
			t.Errorf("message = %q", msg)
		}
		counts, err := h.db.CountRunsByStatus(h.ctx, h.user.ID)
		if err != nil {
			t.Fatal(err)
		}
		for s, n := range counts {
			if n != 0 {
				t.Errorf("%d %s runs stored", n, s)
			}
		}
		if n := len(h.srv.Requests()); n != 0 {
			t.Errorf("%d requests reached an endpoint", n)
		}
	})
}

func countEvents(evs []*spec.Event, typ spec.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func eventTypes(evs []*spec.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Type)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// checkToolEventOrder checks that a reply's first tool_call follows its
// model call's events (the call's cost update) and every later one the
// result of the call before it, and that the next tool event after each is
// its own tool_result: the first tool_call is written with the model
// call's record, the others on their own.
func checkToolEventOrder(t *testing.T, evs []*spec.Event) {
	t.Helper()
	callID := func(e *spec.Event) string {
		var d struct {
			CallID string `json:"call_id"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("event %d %s: %v", e.Seq, e.Type, err)
		}
		return d.CallID
	}
	for i, e := range evs {
		if e.Type != spec.EventToolCall {
			continue
		}
		if prev := evs[i-1].Type; prev != spec.EventIterationCostUpdate && prev != spec.EventToolResult {
			t.Errorf("tool_call #%d follows %s", e.Seq, prev)
		}
		j := i + 1
		for j < len(evs) && evs[j].Type != spec.EventToolCall && evs[j].Type != spec.EventToolResult {
			j++ // the tool's own events (a document written)
		}
		if j >= len(evs) || evs[j].Type != spec.EventToolResult || callID(evs[j]) != callID(e) {
			t.Errorf("tool_call #%d (%s) is not followed by its tool_result", e.Seq, callID(e))
		}
	}
}

// The planner's last call ends the iteration, so its tool_result commits
// with the iteration's outcome rather than in a commit of its own; the
// results of the calls before it still commit as they come.
func TestTheLastCallsResultCommitsWithTheOutcome(t *testing.T) {
	h := newE2E(t, e2eOptions{},
		tools(call("workspace_write", map[string]any{"path": "notes/a.md", "content": "# A\n\nwritten"})),
		status(false, "Wrote notes/a.md."),
		status(true, "Done.", "notes/a.md is written"),
	)
	narrate(h.srv, "A narrative.")
	run := h.waitStatus(h.create(spec.Config{}).ID, spec.StatusCompleted)
	checkToolEventOrder(t, h.events(run.ID))
	// The store hands a commit's events on after the commit, so the run
	// can read completed before its last commit is recorded here.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		commits := h.commits.of(run.ID)
		if len(commits) > 0 && slices.ContainsFunc(commits[len(commits)-1], func(e *spec.Event) bool {
			return e.Type == spec.EventRunCompleted
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's last commit, with run_completed, was not handed on within 10 s")
		}
	}

	tool := func(e *spec.Event) string {
		var d spec.ToolResultData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("event %d %s: %v", e.Seq, e.Type, err)
		}
		return d.Tool
	}
	finishers, writes := 0, 0
	for _, commit := range h.commits.of(run.ID) {
		for i, e := range commit {
			if e.Type != spec.EventToolResult {
				continue
			}
			var types []spec.EventType
			for _, c := range commit {
				types = append(types, c.Type)
			}
			switch tool(e) {
			case "report_status":
				finishers++
				// The result, then the iteration's own events, ending
				// with its completion, in one commit.
				if !slices.Contains(types[i+1:], spec.EventIterationCompleted) {
					t.Errorf("report_status's result committed without the iteration's outcome: %v", types)
				}
			case "workspace_write":
				writes++
				if slices.Contains(types, spec.EventIterationCompleted) {
					t.Errorf("workspace_write's result waited for the iteration's outcome: %v", types)
				}
			}
		}
	}
	if finishers != 2 || writes != 1 {
		t.Errorf("tool results seen in commits: %d report_status, %d workspace_write; want 2 and 1", finishers, writes)
	}
}
