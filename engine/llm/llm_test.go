package llm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"homework/db"
	"homework/engine/llm/llmtest"
	"homework/engine/spec"
)

func TestIterate(t *testing.T) {
	t.Run("a research iteration writes documents, updates tasks and reports completion", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil,
			tools(call(toolSearch, map[string]any{"query": "sqlite drivers"}), call(toolList, map[string]any{})),
			tools(call(toolTasksAdd, map[string]any{"title": "Compare drivers"}),
				call(toolWrite, map[string]any{"path": "notes/drivers.md", "content": "# Drivers\n\nmodernc, mattn, ncruces"})),
			tools(call(toolTasksUpdate, map[string]any{"id": "Compare drivers", "status": "done", "passes": true}),
				call(toolWrite, map[string]any{"path": "report.md", "content": "# Recommendation\n\nUse modernc."})),
			tools(call(toolScratchpad, map[string]any{"heading": "done", "text": "Wrote report.md."})),
			report(true, "Wrote the recommendation in report.md.", "report.md written", "all tasks done"),
		)
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == nil || !res.Status.ExitSignal || res.Summary != "Wrote the recommendation in report.md." {
			t.Fatalf("status %+v summary %q", res.Status, res.Summary)
		}
		if res.ToolCalls != 8 {
			t.Errorf("ToolCalls = %d, want 8", res.ToolCalls)
		}
		if res.Error != "" || res.Stuck != "" || res.Fatal != nil {
			t.Errorf("unexpected error %q stuck %q fatal %v", res.Error, res.Stuck, res.Fatal)
		}
		// Artifacts are what the tools did.
		created, updated := refKeys(res.Artifacts.Created), refKeys(res.Artifacts.Updated)
		for _, want := range []string{"document:notes/drivers.md", "document:report.md", "task:Compare drivers", "document:iterations/001-summary.md"} {
			if !created[want] {
				t.Errorf("created artifacts %v lack %s", created, want)
			}
		}
		if !updated["document:scratchpad.md"] || len(updated) != 1 {
			t.Errorf("updated artifacts = %v, want only the scratchpad", updated)
		}
		if created["document:notes"] {
			t.Errorf("folders are not artifacts")
		}
		ts := f.tasks()
		if len(ts) != 1 || ts[0].Status != spec.TaskDone || !ts[0].Passes {
			t.Fatalf("tasks = %+v", ts)
		}
		if d := f.doc("notes"); d.Kind != spec.DocFolder {
			t.Errorf("notes kind = %q", d.Kind)
		}
		if d := f.doc("report.md"); d.Title != "Recommendation" || d.Iteration != 1 {
			t.Errorf("report.md = %+v", d)
		}
		if !strings.Contains(f.doc("scratchpad.md").Content, "Wrote report.md.") {
			t.Error("scratchpad not appended")
		}
		if !strings.Contains(f.doc("iterations/001-summary.md").Content, "Wrote the recommendation") {
			t.Error("iteration summary missing")
		}
		f.checkTree()
		if n := len(f.storedEvents("task_updated")); n != 2 {
			t.Errorf("task_updated events = %d, want 2", n)
		}
		var paths []string
		for _, ev := range f.storedEvents("document_created") {
			paths = append(paths, ev["path"].(string))
		}
		for _, want := range []string{"", "scratchpad.md", "notes", "notes/drivers.md", "report.md", "iterations", "iterations/001-summary.md"} {
			if !contains(paths, want) {
				t.Errorf("document_created events %q lack %q", paths, want)
			}
		}
		if n, m := len(f.host.Events("tool_call")), len(f.host.Events("tool_result")); n != 8 || m != 8 {
			t.Errorf("tool_call/tool_result events = %d/%d", n, m)
		}
		calls := f.host.Calls()
		if len(calls) != 5 {
			t.Fatalf("llm calls = %d, want 5", len(calls))
		}
		for _, c := range calls {
			if c.Role != RolePlanner || c.Model != "gpt-4o-mini" || !c.Priced || c.PromptTokens != 100 || c.CompletionTokens != 20 {
				t.Errorf("call %+v", c)
			}
			if want := (100*0.15 + 20*0.60) / 1e6; math.Abs(c.CostUSD-want) > 1e-12 {
				t.Errorf("cost = %v, want %v", c.CostUSD, want)
			}
		}
		first := f.srv.Requests()[0]
		if !strings.Contains(first.Messages[1].Content, f.cfg.Objective) || !first.HasTool(toolReportStatus) || first.HasTool(toolWebFetch) {
			t.Errorf("first request context/tools wrong")
		}
		if first.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("authorization header = %q", first.Header.Get("Authorization"))
		}
		if res.Progress == "" {
			t.Error("no progress fingerprint")
		}
	})

	t.Run("a premature completion claim is passed to the gate as reported", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, report(true, "All done."))
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == nil || !res.Status.ExitSignal || len(res.Status.CompletionEvidence) != 0 {
			t.Fatalf("status = %+v", res.Status)
		}
		if len(res.Artifacts.Created) != 1 { // only the iteration summary
			t.Errorf("artifacts = %+v", res.Artifacts)
		}
	})

	t.Run("an iteration that ends without report_status has no status", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, llmtest.Text("I think we are done."), llmtest.Text("Really."), llmtest.Text("Done."))
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != nil || !strings.HasPrefix(res.Summary, NotDoneSummary) {
			t.Fatalf("status %+v summary %q", res.Status, res.Summary)
		}
		if !strings.HasPrefix(res.Stuck, StuckNoAction) || res.Output != "Done." {
			t.Errorf("stuck %q output %q", res.Stuck, res.Output)
		}
		// The model was nudged to act between the replies.
		if last := f.srv.Requests()[1].Last(); !strings.Contains(last, "report_status") {
			t.Errorf("nudge = %q", last)
		}
	})

	t.Run("ask_user ends the iteration with blocking questions", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil,
			tools(call(toolAskUser, map[string]any{"questions": []string{"Which Go version?", "CGO allowed?"}}),
				call(toolList, map[string]any{})))
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		st := res.Status
		if st == nil || !st.NeedsUserInput || len(st.BlockingQuestions) != 2 || st.ExitSignal {
			t.Fatalf("status = %+v", st)
		}
		if res.ToolCalls != 1 {
			t.Errorf("calls after ask_user ran: ToolCalls = %d", res.ToolCalls)
		}
	})

	t.Run("the tool-call bound leaves one turn to report", func(t *testing.T) {
		f := newFixture(t, spec.Config{Budgets: spec.Budgets{IterationToolCalls: 2}}, nil,
			tools(call(toolList, map[string]any{}), call(toolTasksList, map[string]any{}), call(toolList, map[string]any{"prefix": "x"})),
			report(false, "Out of calls."))
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == nil || res.ToolCalls != 3 {
			t.Fatalf("status %+v calls %d", res.Status, res.ToolCalls)
		}
		last := f.srv.Requests()[1]
		if len(last.Tools) != 1 || !last.HasTool(toolReportStatus) {
			t.Errorf("final turn offered %d tools", len(last.Tools))
		}
	})

	t.Run("the context carries feedback, inbox and summaries", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, report(false, "ok"))
		in := f.input(3)
		in.Feedback = &spec.Feedback{Decision: "continue", Reasons: []string{"check failed"},
			FailingChecks: []spec.CheckResult{{Name: "tests", Type: "command", Message: "exit 1", OutputTail: "FAIL TestX"}},
			RemainingWork: []string{"write report.md"}}
		in.Inbox = []spec.InboxItem{{Kind: "message", Body: "Please include benchmarks."}}
		in.Summaries = []string{"did A", "did B"}
		if _, err := f.iterate(in); err != nil {
			t.Fatal(err)
		}
		ctxt := f.srv.Requests()[0].Messages[1].Content
		for _, want := range []string{"FAIL TestX", "write report.md", "Please include benchmarks.", "did B", "iteration 3"} {
			if !strings.Contains(ctxt, want) {
				t.Errorf("context lacks %q", want)
			}
		}
	})

	t.Run("the context is bounded", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, func(o *Options) { o.MaxContextChars = 3000 }, report(false, "ok"))
		in := f.input(2)
		for range 20 {
			in.Inbox = append(in.Inbox, spec.InboxItem{Kind: "message", Body: strings.Repeat("x", 5000)})
		}
		if _, err := f.iterate(in); err != nil {
			t.Fatal(err)
		}
		if n := len(f.srv.Requests()[0].Messages[1].Content); n > 3000 {
			t.Errorf("context is %d chars", n)
		}
	})
}

func refKeys(refs []spec.Ref) map[string]bool {
	m := map[string]bool{}
	for _, r := range refs {
		k := r.Path
		if r.Type == "task" {
			k = r.Title
		}
		m[r.Type+":"+k] = true
	}
	return m
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestDelegate(t *testing.T) {
	t.Run("branches run in parallel, write under branches/<id>/ and report summed usage", func(t *testing.T) {
		f := newFixture(t, spec.Config{Models: &spec.Models{Executor: "gpt-4.1-nano"}}, nil,
			tools(call(toolDelegate, map[string]any{"tasks": []map[string]any{
				{"id": "a", "title": "Driver A", "instructions": "Study A"},
				{"id": "b", "title": "Driver B", "instructions": "Study B"},
				{"id": "c", "title": "Driver C", "instructions": "Study C"},
			}})),
			report(false, "Branches done."))
		var mu sync.Mutex
		arrived := 0
		all := make(chan struct{})
		f.srv.Route(func(r llmtest.Request) (llmtest.Reply, bool) {
			sys := r.System()
			if !strings.Contains(sys, "executor agent") {
				return llmtest.Reply{}, false
			}
			id := sys[strings.Index(sys, "(branch ")+8:][:1]
			if r.Messages[len(r.Messages)-1].Role == "tool" {
				return llmtest.Reply{ToolCalls: []llmtest.Call{call(toolFinish, map[string]any{"result": "found " + id})},
					PromptTokens: 50, CompletionTokens: 10}, true
			}
			// Hold each branch's first request until all three are in flight.
			mu.Lock()
			if arrived++; arrived == 3 {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
			}
			return llmtest.Reply{ToolCalls: []llmtest.Call{call(toolWrite, map[string]any{"path": "findings.md", "content": "# " + id})},
				PromptTokens: 50, CompletionTokens: 10}, true
		})
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if n := f.srv.MaxConcurrent(); n != 3 {
			t.Errorf("max concurrent requests = %d, want 3", n)
		}
		for _, id := range []string{"a", "b", "c"} {
			if d := f.doc("branches/" + id); d.Kind != spec.DocBranch {
				t.Errorf("branch folder kind %q", d.Kind)
			}
			if got := f.doc("branches/" + id + "/findings.md").Content; got != "# "+id {
				t.Errorf("findings %s = %q", id, got)
			}
			if !strings.Contains(f.doc("branches/"+id+"/result.md").Content, "found "+id) {
				t.Errorf("result %s missing", id)
			}
		}
		f.checkTree()
		var n int
		var prompt, completion int64
		for _, c := range f.host.Calls() {
			if c.Role == RoleExecutor {
				n++
				prompt += c.PromptTokens
				completion += c.CompletionTokens
				if c.Model != "gpt-4.1-nano" || !c.Priced {
					t.Errorf("executor call %+v", c)
				}
			}
		}
		if n != 6 || prompt != 300 || completion != 60 {
			t.Errorf("executor calls %d, tokens %d/%d", n, prompt, completion)
		}
		if res.ToolCalls != 8 {
			t.Errorf("ToolCalls = %d, want 8", res.ToolCalls)
		}
		// The planner saw every branch's result and usage.
		var toolMsg string
		for _, m := range f.srv.Requests()[len(f.srv.Requests())-1].Messages {
			if m.Role == "tool" {
				toolMsg = m.Content
			}
		}
		for _, want := range []string{"Branch a", "found b", "Branch c", "tokens: 100 in, 20 out"} {
			if !strings.Contains(toolMsg, want) {
				t.Errorf("delegate result lacks %q:\n%s", want, toolMsg)
			}
		}
		if branchEvents := f.host.Events("tool_call"); len(branchEvents) != 8 {
			t.Errorf("tool_call events = %d", len(branchEvents))
		}
	})
}

func TestRepair(t *testing.T) {
	t.Run("invalid arguments are repaired and the call runs", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil,
			tools(call(toolWrite, `{"path": "notes/a.md"}`)),
			llmtest.Text("```json\n{\"path\": \"notes/a.md\", \"content\": \"repaired\"}\n```"),
			report(false, "ok"))
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if got := f.doc("notes/a.md").Content; got != "repaired" {
			t.Errorf("content %q", got)
		}
		if res.Error != "" {
			t.Errorf("error %q", res.Error)
		}
		if got := strings.Join(f.host.roles(), ","); got != "planner,repair,planner" {
			t.Errorf("roles %s", got)
		}
		repairReq := f.srv.Requests()[1]
		if !strings.Contains(repairReq.Last(), `"required":["path","content"]`) || !strings.Contains(repairReq.Last(), "content") {
			t.Errorf("repair request lacks the schema or error: %s", repairReq.Last())
		}
		if r := f.host.Events("tool_result")[0].Data; r["repaired"] != true || r["ok"] != true {
			t.Errorf("tool_result %v", r)
		}
	})

	t.Run("arguments still invalid after two repairs fail the call with a fingerprint", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil,
			tools(call(toolWrite, `{"path": "notes/a.md", "content": 12`)),
			llmtest.Text("not json"),
			llmtest.Text(`{"path": "notes/a.md"}`),
			report(false, "gave up"))
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if f.hasDoc("notes/a.md") {
			t.Error("the invalid write ran")
		}
		if got := strings.Join(f.host.roles(), ","); got != "planner,repair,repair,planner" {
			t.Errorf("roles %s", got)
		}
		if !strings.HasPrefix(res.ErrorFingerprint, "tool:workspace_write:invalid_arguments:") || res.Error == "" {
			t.Errorf("error %q fingerprint %q", res.Error, res.ErrorFingerprint)
		}
		if res.Status == nil {
			t.Error("the loop did not continue after the failed call")
		}
		obs := f.srv.Requests()[3].Messages
		if last := obs[len(obs)-1]; last.Role != "tool" || !strings.Contains(last.Content, "invalid arguments") {
			t.Errorf("observation %q", last.Content)
		}
	})
}

func TestACorrectedCallDoesNotPoisonAValidReport(t *testing.T) {
	f := newFixture(t, spec.Config{}, nil,
		tools(call(toolReportStatus, `{"exit_signal": "yes"`)),
		llmtest.Text("not json"),
		llmtest.Text("still not json"),
		report(true, "all done", "notes/a.md written"))
	res, err := f.iterate(f.input(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status == nil || !res.Status.ExitSignal {
		t.Fatalf("status %+v", res.Status)
	}
	if res.Error != "" || res.ErrorFingerprint != "" {
		t.Fatalf("the corrected report_status left the error %q (%s)", res.Error, res.ErrorFingerprint)
	}
	if r := f.host.Events("tool_result")[0].Data; r["ok"] != false {
		t.Fatalf("the malformed call was not reported as failed: %v", r)
	}
}

func TestModelErrors(t *testing.T) {
	t.Run("429 with Retry-After is retried after the delay", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil,
			llmtest.Reply{Status: 429, Content: "slow down", Header: map[string]string{"Retry-After": "1"}},
			report(false, "ok"))
		res, err := f.iterate(f.input(1))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == nil {
			t.Fatal("no status")
		}
		reqs := f.srv.Requests()
		if gap := reqs[1].At.Sub(reqs[0].At); gap < 900*time.Millisecond {
			t.Errorf("retried after %v, Retry-After said 1s", gap)
		}
		calls := f.host.Calls()
		if len(calls) != 2 || !strings.Contains(calls[0].Error, "429") || calls[1].Error != "" {
			t.Errorf("calls %+v", calls)
		}
	})

	t.Run("a Retry-After past the iteration's deadline is not waited for", func(t *testing.T) {
		// The fixture's iteration has 30 s; the endpoint asks for an hour.
		f := newFixture(t, spec.Config{}, func(o *Options) { o.MaxRetryDelay = 2 * time.Hour },
			llmtest.Reply{Status: 503, Content: "come back later", Header: map[string]string{"Retry-After": "3600"}})
		res, err := f.iterate(f.input(1))
		var me *ModelError
		if !errors.As(err, &me) || me.Status != 503 || me.RetryAfter != time.Hour {
			t.Fatalf("err = %v; want the endpoint's 503 with its Retry-After, not the deadline", err)
		}
		if res.ErrorFingerprint != "model:http_503" || !strings.Contains(res.Error, "come back later") {
			t.Errorf("result error %q (%s)", res.Error, res.ErrorFingerprint)
		}
		if n := len(f.srv.Requests()); n != 1 {
			t.Errorf("requests = %d, want 1", n)
		}
	})

	t.Run("5xx is retried with backoff then fails with a fingerprint", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, llmtest.Error(502, "bad gateway"), llmtest.Error(502, "bad gateway"), llmtest.Error(502, "bad gateway"))
		res, err := f.iterate(f.input(1))
		var me *ModelError
		if !errors.As(err, &me) || me.Status != 502 {
			t.Fatalf("err = %v", err)
		}
		if res.ErrorFingerprint != "model:http_502" || res.Fatal != nil || res.Status != nil {
			t.Errorf("result %+v", res)
		}
		if n := len(f.srv.Requests()); n != 3 {
			t.Errorf("requests = %d, want 3 (RetryMax 2)", n)
		}
		if !strings.HasPrefix(res.Summary, NotDoneSummary) {
			t.Errorf("summary %q", res.Summary)
		}
	})

	t.Run("401 stops the run with a fatal error and no retry", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, llmtest.Error(401, "Incorrect API key provided"))
		res, err := f.iterate(f.input(1))
		if err == nil || res.Fatal == nil {
			t.Fatalf("err %v fatal %v", err, res.Fatal)
		}
		if want := "The model endpoint refused the API key (401) — check HOMEWORK_LLM_API_KEY"; res.Fatal.Detail != want || res.Fatal.Type != "error" {
			t.Errorf("fatal = %+v", res.Fatal)
		}
		if n := len(f.srv.Requests()); n != 1 {
			t.Errorf("requests = %d", n)
		}
	})

	t.Run("404 fails the iteration without retry", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, llmtest.Error(404, "model not found"))
		res, err := f.iterate(f.input(1))
		if err == nil || res.ErrorFingerprint != "model:http_404" || res.Fatal != nil || len(f.srv.Requests()) != 1 {
			t.Errorf("err %v result %+v", err, res)
		}
	})

	t.Run("a response with no choices is retried and then fails", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, llmtest.Reply{NoChoices: true}, llmtest.Reply{NoChoices: true}, llmtest.Reply{NoChoices: true})
		res, err := f.iterate(f.input(1))
		if err == nil || res.ErrorFingerprint != "model:no_choices" {
			t.Errorf("err %v fingerprint %q", err, res.ErrorFingerprint)
		}
		// Usage of the empty responses is still recorded.
		if calls := f.host.Calls(); len(calls) != 3 || calls[0].PromptTokens != 100 {
			t.Errorf("calls %+v", calls)
		}
	})

	t.Run("a truncated or malformed body fails with a fingerprint", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"id": "x", "choices": [`: "model:truncated_response",
			`{"choices": "nope"}`:      "model:malformed_response",
		} {
			bad := llmtest.Reply{Body: body}
			f := newFixture(t, spec.Config{}, nil, bad, bad, bad)
			res, err := f.iterate(f.input(1))
			if err == nil || res.ErrorFingerprint != want {
				t.Errorf("%s: err %v fingerprint %q, want %s", body, err, res.ErrorFingerprint, want)
			}
		}
	})

	t.Run("a reply cut off for length is nudged and the loop goes on", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, nil, llmtest.Reply{Content: "A very long", FinishReason: "length"}, report(false, "ok"))
		res, err := f.iterate(f.input(1))
		if err != nil || res.Status == nil {
			t.Fatalf("err %v status %v", err, res.Status)
		}
		if last := f.srv.Requests()[1].Last(); !strings.Contains(last, "cut off") {
			t.Errorf("nudge %q", last)
		}
	})

	t.Run("an unknown tool and bad JSON arguments do not panic", func(t *testing.T) {
		f := newFixture(t, spec.Config{}, func(o *Options) { o.RetryMax = -1 },
			tools(call("rm_rf", `{}`), call(toolRead, `{"path":`)),
			llmtest.Text("{broken"), llmtest.Text("{broken"),
			report(false, "ok"))
		res, err := f.iterate(f.input(1))
		if err != nil || res.Status == nil {
			t.Fatalf("err %v status %v", err, res.Status)
		}
		results := f.host.Events("tool_result")
		if len(results) != 3 || results[0].Data["ok"] != false || results[1].Data["ok"] != false || !strings.Contains(results[0].Data["result"].(string), "unknown tool") {
			t.Errorf("results %+v", results)
		}
	})

	t.Run("the end of the iteration's time returns the partial result", func(t *testing.T) {
		// The deadline falls inside the model call (which would take 10 s),
		// with room under load for the context assembly before it.
		f := newFixture(t, spec.Config{}, nil, llmtest.Reply{Delay: 10 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		res, err := f.e.Iterate(ctx, f.input(1))
		if !errors.Is(err, context.DeadlineExceeded) || res == nil || res.ErrorFingerprint != "iteration:timeout" {
			t.Fatalf("err %v res %+v", err, res)
		}
		if !f.hasDoc("iterations/001-summary.md") {
			t.Error("the summary was not written after the deadline")
		}
	})
}

func TestCachedAndReasoningTokensArePricedAtTheirRates(t *testing.T) {
	r := report(false, "ok")
	r.PromptTokens, r.CachedTokens, r.CompletionTokens, r.ReasoningTokens = 100_000, 80_000, 2_000, 1_500
	f := newFixture(t, spec.Config{Model: "gpt-5.1"}, nil, r)
	if _, err := f.iterate(f.input(1)); err != nil {
		t.Fatal(err)
	}
	calls := f.host.Calls()
	want := (20_000*1.25 + 80_000*0.125 + 2_000*10) / 1e6
	if len(calls) != 1 || calls[0].CachedTokens != 80_000 || calls[0].ReasoningTokens != 1_500 || calls[0].CostSource != spec.CostSourceTable ||
		math.Abs(calls[0].CostUSD-want) > 1e-12 {
		t.Errorf("calls %+v; want 80k cached and 1.5k reasoning tokens at $%v from the table", calls, want)
	}
}

func TestUnpricedModel(t *testing.T) {
	f := newFixture(t, spec.Config{Model: "my-local-llama"}, nil, report(false, "ok"))
	if _, err := f.iterate(f.input(1)); err != nil {
		t.Fatal(err)
	}
	calls := f.host.Calls()
	if len(calls) != 1 || calls[0].Priced || calls[0].CostUSD != 0 || calls[0].Model != "my-local-llama" {
		t.Errorf("calls %+v", calls)
	}
}

func TestScratchpadRollover(t *testing.T) {
	text := strings.Repeat("lorem ipsum ", 20) // 240 bytes
	f := newFixture(t, spec.Config{}, func(o *Options) { o.ScratchpadMaxBytes = 700 },
		tools(call(toolScratchpad, map[string]any{"heading": "one", "text": text}),
			call(toolScratchpad, map[string]any{"heading": "two", "text": text})),
		tools(call(toolScratchpad, map[string]any{"heading": "three", "text": text})),
		tools(call(toolScratchpad, map[string]any{"heading": "four", "text": text})),
		report(false, "ok"))
	res, err := f.iterate(f.input(1))
	if err != nil {
		t.Fatal(err)
	}
	arch := f.doc("scratchpad/001.md")
	if arch.Kind != spec.DocScratchpad || !strings.Contains(arch.Content, "one") || !strings.Contains(arch.Content, "two") {
		t.Errorf("archive = %q", arch.Content)
	}
	sp := f.doc("scratchpad.md")
	if len(sp.Content) > 700 || !strings.Contains(sp.Content, "scratchpad/001.md") || !strings.Contains(sp.Content, "four") {
		t.Errorf("scratchpad (%d bytes) = %q", len(sp.Content), sp.Content)
	}
	if !strings.Contains(sp.Content, "- Iteration 1 — two") {
		t.Errorf("rollover summary lacks archived headings: %q", sp.Content)
	}
	if !refKeys(res.Artifacts.Created)["document:scratchpad/001.md"] {
		t.Errorf("archive not in artifacts %+v", res.Artifacts.Created)
	}
	f.checkTree()
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t, spec.Config{Permissions: spec.Permissions{WriteMode: spec.WriteReadOnly}}, nil,
		tools(call(toolTasksAdd, map[string]any{"title": "x"}),
			call(toolWrite, map[string]any{"path": "report.md", "content": "x"}),
			call(toolWrite, map[string]any{"path": "notes/idea.md", "content": "idea"}),
			call(toolScratchpad, map[string]any{"text": "thinking"})),
		report(false, "planned"))
	res, err := f.iterate(f.input(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.tasks()) != 0 || f.hasDoc("report.md") {
		t.Error("a refused write happened")
	}
	if !f.hasDoc("notes/idea.md") || !strings.Contains(f.doc("scratchpad.md").Content, "thinking") {
		t.Error("notes were refused")
	}
	results := f.host.Events("tool_result")
	for i, want := range []bool{false, false, true, true} {
		if results[i].Data["ok"] != want {
			t.Errorf("call %d ok = %v: %v", i, results[i].Data["ok"], results[i].Data["result"])
		}
	}
	if !strings.Contains(results[0].Data["result"].(string), "read_only") {
		t.Errorf("refusal %q", results[0].Data["result"])
	}
	if res.Error != "" {
		t.Errorf("a refusal is not an iteration error: %q", res.Error)
	}
	if !strings.Contains(f.srv.Requests()[0].Messages[1].Content, "read_only") {
		t.Error("the context does not explain read_only")
	}
}

func TestApprovePlan(t *testing.T) {
	f := newFixture(t, spec.Config{Permissions: spec.Permissions{WriteMode: spec.WriteApprovePlan}}, nil,
		tools(call(toolWrite, map[string]any{"path": "plan.md", "content": "# Plan\n\n1. Compare\n2. Recommend"}),
			call(toolWrite, map[string]any{"path": "report.md", "content": "early"})),
		report(false, "Plan written."),
		tools(call(toolTasksAdd, map[string]any{"title": "Compare"})),
		report(false, "Started."))
	res, err := f.iterate(f.input(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.WaitForApproval == "" || !strings.Contains(res.WaitForApproval, "plan.md") {
		t.Errorf("WaitForApproval = %q", res.WaitForApproval)
	}
	if f.doc("plan.md").Kind != spec.DocPlan || f.hasDoc("report.md") {
		t.Error("plan phase wrote the wrong documents")
	}
	first := f.srv.Requests()[0]
	if first.HasTool(toolTasksAdd) || first.HasTool(toolDelegate) || !strings.Contains(first.Messages[1].Content, "plan.md") {
		t.Error("the plan phase offered write tools or did not ask for plan.md")
	}

	in := f.input(2)
	in.Inbox = []spec.InboxItem{{Kind: "answer", Body: "Approved."}}
	res, err = f.iterate(in)
	if err != nil {
		t.Fatal(err)
	}
	if res.WaitForApproval != "" || len(f.tasks()) != 1 {
		t.Errorf("after approval: wait %q tasks %d", res.WaitForApproval, len(f.tasks()))
	}
	ctxt := f.srv.Requests()[2].Messages[1].Content
	if !strings.Contains(ctxt, "Approved.") || !strings.Contains(ctxt, "1. Compare") {
		t.Error("the approved plan and answer are not in the context")
	}
}

func TestDetectStuck(t *testing.T) {
	act := func(a, obs string, errored bool) step { return step{action: a, observation: obs, errored: errored} }
	none := step{noAction: true}
	tests := []struct {
		name  string
		steps []step
		want  string
	}{
		{"nothing yet", nil, ""},
		{"varied actions", []step{act("a", "1", false), act("b", "2", false), act("c", "3", false), act("d", "4", false)}, ""},
		{"same action and observation four times", []step{act("x", "o", false), act("a", "o", false), act("a", "o", false), act("a", "o", false), act("a", "o", false)}, StuckRepeatedAction},
		{"same action three times with new observations", []step{act("a", "1", false), act("a", "2", false), act("a", "3", false), act("a", "4", false)}, ""},
		{"same action erroring three times", []step{act("a", "e1", true), act("a", "e2", true), act("a", "e3", true)}, StuckRepeatedError},
		{"different actions erroring", []step{act("a", "e", true), act("b", "e", true), act("c", "e", true)}, ""},
		{"three messages without action", []step{act("a", "1", false), none, none, none}, StuckNoAction},
		{"two messages without action", []step{none, none, act("a", "1", false), none}, ""},
		{"ping-pong over six calls", []step{act("a", "1", false), act("b", "2", false), act("a", "3", false), act("b", "4", false), act("a", "5", false), act("b", "6", false)}, StuckPingPong},
		{"ping-pong over five calls", []step{act("c", "1", false), act("b", "2", false), act("a", "3", false), act("b", "4", false), act("a", "5", false), act("b", "6", false)}, ""},
	}
	for _, tt := range tests {
		got := detectStuck(tt.steps)
		if (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: detectStuck = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestStuckLoopStopsEarly(t *testing.T) {
	read := call(toolRead, map[string]any{"path": "missing.md"})
	f := newFixture(t, spec.Config{}, nil, tools(read), tools(read), tools(read), tools(read), report(false, "never"))
	res, err := f.iterate(f.input(1))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Stuck, StuckRepeatedError) || res.Status != nil || res.ToolCalls != 3 {
		t.Errorf("stuck %q status %v calls %d", res.Stuck, res.Status, res.ToolCalls)
	}
	if f.srv.Remaining() != 2 {
		t.Errorf("the loop went on after the pattern: %d replies left", f.srv.Remaining())
	}
}

func TestStartRunIsIdempotent(t *testing.T) {
	f := newFixture(t, spec.Config{}, nil)
	root := f.run.WorkspaceDocID
	ctx := context.Background()
	err := f.db.WriteTx(ctx, func(tx spec.Tx) error { return f.e.StartRun(ctx, tx, f.run, f.cfg) })
	if err != nil {
		t.Fatal(err)
	}
	if f.run.WorkspaceDocID != root || root == "" {
		t.Errorf("root changed: %q -> %q", root, f.run.WorkspaceDocID)
	}
	if n := len(f.storedEvents("document_created")); n != 2 {
		t.Errorf("document_created events = %d, want 2", n)
	}
	if d := f.doc(""); d.Kind != spec.DocWorkspace || !strings.Contains(d.Title, "SQLite") {
		t.Errorf("root = %+v", d)
	}
	if d := f.doc("scratchpad.md"); d.ParentID != root || d.Kind != spec.DocScratchpad {
		t.Errorf("scratchpad = %+v", d)
	}
}

func TestValidateConfig(t *testing.T) {
	ctx := context.Background()
	d, err := db.Open(ctx, db.Options{Path: filepath.Join(t.TempDir(), "v.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	unconfigured, _ := New(Options{Store: d, DefaultModel: "gpt-4o"})
	err = unconfigured.ValidateConfig(ctx, nil, &spec.Config{})
	if spec.ErrorCode(err) != spec.EUNAVAILABLE || spec.ErrorField(err) != "executor" || unconfigured.Configured() {
		t.Errorf("unconfigured: %v", err)
	}
	for _, env := range []string{"HOMEWORK_LLM_BASE_URL", "HOMEWORK_LLM_API_KEY", "HOMEWORK_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"} {
		if !strings.Contains(spec.ErrorMessage(err), env) {
			t.Errorf("message does not mention %s", env)
		}
	}
	noModel, _ := New(Options{Store: d, BaseURL: "http://localhost:11434"})
	if err := noModel.ValidateConfig(ctx, nil, &spec.Config{}); spec.ErrorField(err) != "model" {
		t.Errorf("no model: %v", err)
	}
	if err := noModel.ValidateConfig(ctx, nil, &spec.Config{Model: "llama3"}); err != nil {
		t.Errorf("with model: %v", err)
	}
	if noModel.BaseURL() != "http://localhost:11434/v1" {
		t.Errorf("base URL %q", noModel.BaseURL())
	}
	withDefault, _ := New(Options{Store: d, APIKey: "k", DefaultModel: "gpt-4o"})
	if err := withDefault.ValidateConfig(ctx, nil, &spec.Config{}); err != nil {
		t.Errorf("default model: %v", err)
	}
	cfg := &spec.Config{Model: "m", Models: &spec.Models{Planner: "p", Summarizer: "s"}}
	if withDefault.Model(cfg, RolePlanner) != "p" || withDefault.Model(cfg, RoleExecutor) != "m" ||
		withDefault.Model(cfg, RoleSummarizer) != "s" || withDefault.Model(&spec.Config{}, RoleExecutor) != "gpt-4o" {
		t.Error("model resolution wrong")
	}
}

func TestNormalizeBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                                      "",
		"https://api.openai.com/v1":             "https://api.openai.com/v1",
		"https://api.openai.com/v1/":            "https://api.openai.com/v1",
		"http://localhost:11434":                "http://localhost:11434/v1",
		"https://openrouter.ai/api/v1":          "https://openrouter.ai/api/v1",
		"http://h:1/v1/chat/completions":        "http://h:1/v1",
		" http://localhost:1234/v1/ ":           "http://localhost:1234/v1",
		"https://openrouter.ai/api":             "https://openrouter.ai/api/v1",
		"http://vllm:8000/v1/chat/completions/": "http://vllm:8000/v1",
	} {
		if got := NormalizeBaseURL(in); got != want {
			t.Errorf("NormalizeBaseURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		after, afterMS string
		want           time.Duration
	}{
		{"", "", 0},
		{"3", "", 3 * time.Second},
		{"0", "", 0},
		{now.Add(10 * time.Second).Format(http.TimeFormat), "", 10 * time.Second},
		{now.Add(-10 * time.Second).Format(http.TimeFormat), "", 0},
		{"soon", "", 0},
		{"3", "250", 250 * time.Millisecond},
	}
	for _, tt := range tests {
		s := &retrySlot{retryAfter: tt.after, retryAfterMS: tt.afterMS}
		if got := s.retryDelay(now); got != tt.want {
			t.Errorf("retryDelay(%q, %q) = %v, want %v", tt.after, tt.afterMS, got, tt.want)
		}
	}
}

func TestNarrate(t *testing.T) {
	f := newFixture(t, spec.Config{Models: &spec.Models{Summarizer: "gpt-4.1-mini"}}, nil,
		llmtest.Text("The run compared three drivers. It wrote report.md. It completed."))
	var got []spec.LLMCall
	f.e.opts.RecordNarration = func(ctx context.Context, run *spec.Run, c spec.LLMCall) error {
		got = append(got, c)
		return nil
	}
	report := &spec.Report{Title: "Homework complete", Objective: f.cfg.Objective, Status: "completed", Summary: "old",
		Artifacts: spec.ReportArtifact{Documents: []spec.Ref{{Type: "document", Path: "report.md", Title: "Recommendation"}}}}
	text, err := f.e.Narrate(context.Background(), f.run, f.cfg, report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "report.md") {
		t.Errorf("narrative %q", text)
	}
	if len(got) != 1 || got[0].Role != RoleSummarizer || got[0].Model != "gpt-4.1-mini" || !got[0].Priced {
		t.Errorf("recorded %+v", got)
	}
	req := f.srv.Requests()[0]
	if req.Model != "gpt-4.1-mini" || strings.Contains(req.Last(), `"summary": "old"`) || !strings.Contains(req.Last(), "report.md") {
		t.Errorf("request model %q content %s", req.Model, req.Last())
	}
}

func TestNarrateRecordsInTheStoreByDefault(t *testing.T) {
	f := newFixture(t, spec.Config{}, nil, llmtest.Text("A narrative."))
	if _, err := f.e.Narrate(context.Background(), f.run, f.cfg, &spec.Report{Title: "t"}); err != nil {
		t.Fatal(err)
	}
	calls, err := f.db.ListLLMCalls(context.Background(), f.user.ID, f.run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].Role != RoleSummarizer || calls[0].Iteration != f.run.Iteration {
		t.Errorf("calls %+v", calls)
	}
}

func TestWebFetch(t *testing.T) {
	page := llmtestPage(t)
	f := newFixture(t, spec.Config{}, func(o *Options) {
		o.WebFetch = WebFetchOptions{Enabled: true, AllowHosts: []string{"127.0.0.1"}, MaxBytes: 64}
	},
		tools(call(toolWebFetch, map[string]any{"url": page + "/doc"}),
			call(toolWebFetch, map[string]any{"url": "https://example.com/"}),
			call(toolWebFetch, map[string]any{"url": page + "/bin"})),
		report(false, "ok"))
	if _, err := f.iterate(f.input(1)); err != nil {
		t.Fatal(err)
	}
	if !f.srv.Requests()[0].HasTool(toolWebFetch) {
		t.Error("web_fetch not offered")
	}
	results := f.host.Events("tool_result")
	r0 := results[0].Data["result"].(string)
	if results[0].Data["ok"] != true || !strings.Contains(r0, "Hello") || strings.Contains(r0, "<b>") || strings.Contains(r0, "alert") || !strings.Contains(r0, "cut at 64 bytes") {
		t.Errorf("fetch result %q", r0)
	}
	if results[1].Data["ok"] != false || !strings.Contains(results[1].Data["result"].(string), "allow-list") {
		t.Errorf("disallowed host: %v", results[1].Data)
	}
	if results[2].Data["ok"] != false || !strings.Contains(results[2].Data["result"].(string), "text only") {
		t.Errorf("binary: %v", results[2].Data)
	}
}

func llmtestPage(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/doc", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><script>alert(1)</script><p><b>Hello</b> world</p>"+strings.Repeat("padding ", 50)+"</html>")
	})
	mux.HandleFunc("/bin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte{0x89, 'P', 'N', 'G'})
	})
	srv := newHTTPServer(t, mux)
	return srv
}

// TestProgressFingerprint: the fingerprint changes with the workspace and
// the checklist, not with the scratchpad or the summaries, and an iteration
// that wrote neither reuses its first read for it.
func TestProgressFingerprint(t *testing.T) {
	f := newFixture(t, spec.Config{}, nil,
		report(false, "Looked."),
		tools(call(toolWrite, map[string]any{"path": "notes/a.md", "content": "# A"})), report(false, "Wrote."),
		tools(call(toolTasksAdd, map[string]any{"title": "Check A"})), report(false, "Added."),
		tools(call(toolScratchpad, map[string]any{"text": "tried A"})), report(false, "Noted."),
		tools(call(toolWrite, map[string]any{"path": "notes/a.md", "content": "# A"})), report(false, "Rewrote."),
		report(false, "Looked again."))
	var prints []string
	for i := 1; i <= 6; i++ {
		in := f.input(i)
		res, err := f.iterate(in)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.e.readState(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if want := progress(st); res.Progress != want {
			t.Errorf("iteration %d: fingerprint %s, want %s (the stored state's)", i, res.Progress, want)
		}
		prints = append(prints, res.Progress)
	}
	same := []bool{false, false, true, true, true} // against the iteration before
	for i, s := range same {
		if (prints[i+1] == prints[i]) != s {
			t.Errorf("iterations %d and %d: fingerprints %s and %s, want equal %v", i+1, i+2, prints[i], prints[i+1], s)
		}
	}
}

// TestFoldersAreMadeOnceAndInTheTree: a document under missing folders
// creates each once, top-down, whatever exists above or beside it.
func TestFoldersAreMadeOnceAndInTheTree(t *testing.T) {
	write := func(p string) llmtest.Call { return call(toolWrite, map[string]any{"path": p, "content": "# " + p}) }
	f := newFixture(t, spec.Config{}, nil,
		tools(write("a/b/c.md"), write("a/b/d.md"), write("a/x.md"), write("e/f/g/h.md"), write("e/f/i.md"), write("top.md")),
		report(false, "Wrote."))
	if _, err := f.iterate(f.input(1)); err != nil {
		t.Fatal(err)
	}
	f.checkTree()
	var folders []string
	for _, e := range f.storedEvents(spec.EventDocumentCreated) {
		if e["kind"] == spec.DocFolder {
			folders = append(folders, e["path"].(string))
		}
	}
	want := []string{"a", "a/b", "e", "e/f", "e/f/g", "iterations"}
	if !slices.Equal(folders, want) {
		t.Errorf("folders created %q, want %q", folders, want)
	}
}
