package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/sashabaranov/go-openai"

	"homework/engine/spec"
)

// Tool names.
const (
	toolList          = "workspace_list"
	toolRead          = "workspace_read"
	toolWrite         = "workspace_write"
	toolScratchpad    = "append_scratchpad"
	toolSearch        = "workspace_search"
	toolTasksAdd      = "tasks_add"
	toolTasksUpdate   = "tasks_update"
	toolTasksList     = "tasks_list"
	toolAskUser       = "ask_user"
	toolDelegate      = "delegate"
	toolReportStatus  = "report_status"
	toolWebFetch      = "web_fetch"
	toolFinish        = "finish" // a delegated branch's end
	maxDelegatedTasks = 6
)

// tool is one function the model may call. Its arguments are validated
// against schema before run sees them.
type tool struct {
	name   string
	desc   string
	schema string
	sch    *jsonschema.Schema
	params json.RawMessage
	run    func(ctx context.Context, sc *scope, args json.RawMessage) (string, error)
}

func (t *tool) openai() openai.Tool {
	return openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
		Name: t.name, Description: t.desc, Parameters: t.params}}
}

// validate parses and validates raw arguments, returning them in canonical
// form (keys sorted) for the tool and for the stuck detector.
func (t *tool) validate(raw string) (json.RawMessage, error) {
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %v", err)
	}
	// Many models send null for optional fields they leave out.
	if obj, ok := v.(map[string]any); ok {
		for k, x := range obj {
			if x == nil {
				delete(obj, k)
			}
		}
	}
	if err := t.sch.Validate(v); err != nil {
		return nil, fmt.Errorf("arguments do not match the schema: %s", oneLine(err.Error()))
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// toolError is an error the model caused and can fix (bad path, refused
// write, unknown task). It is shown to the model; it is not an iteration
// error.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

func toolErrorf(format string, args ...any) error {
	return &toolError{msg: fmt.Sprintf(format, args...)}
}

func (e *Executor) buildTools() (map[string]*tool, error) {
	defs := []*tool{
		{name: toolList, desc: "List the documents of this run's research workspace (path, kind, size, title). Optionally only those under a path prefix.",
			schema: `{"type":"object","properties":{"prefix":{"type":"string","maxLength":200}},"additionalProperties":false}`,
			run:    runList},
		{name: toolRead, desc: "Read a workspace document by its path (such as notes/findings.md). Long documents are returned in chunks; pass offset to continue.",
			schema: `{"type":"object","properties":{"path":{"type":"string","minLength":1,"maxLength":300},"offset":{"type":"integer","minimum":0}},"required":["path"],"additionalProperties":false}`,
			run:    runRead},
		{name: toolWrite, desc: "Create or replace a markdown document at a path in the workspace (folders are created as needed). Use it for findings, drafts and deliverables.",
			schema: `{"type":"object","properties":{"path":{"type":"string","minLength":1,"maxLength":200},"content":{"type":"string","maxLength":200000},"title":{"type":"string","maxLength":200},"description":{"type":"string","maxLength":1000},"tags":{"type":"array","items":{"type":"string","maxLength":50},"maxItems":20}},"required":["path","content"],"additionalProperties":false}`,
			run:    runWrite},
		{name: toolScratchpad, desc: "Append a section of working notes to scratchpad.md (your memory across iterations: what you tried, learned and plan next).",
			schema: `{"type":"object","properties":{"text":{"type":"string","minLength":1,"maxLength":20000},"heading":{"type":"string","maxLength":120}},"required":["text"],"additionalProperties":false}`,
			run:    runScratchpad},
		{name: toolSearch, desc: "Full-text search over the documents of all of this person's runs. Returns paths, runs and snippets.",
			schema: `{"type":"object","properties":{"query":{"type":"string","minLength":1,"maxLength":300},"limit":{"type":"integer","minimum":1,"maximum":20}},"required":["query"],"additionalProperties":false}`,
			run:    runSearch},
		{name: toolTasksAdd, desc: "Add a task to the run's checklist.",
			schema: `{"type":"object","properties":{"title":{"type":"string","minLength":1,"maxLength":300},"detail":{"type":"string","maxLength":4000},"status":{"type":"string","enum":["todo","doing","done","blocked"]}},"required":["title"],"additionalProperties":false}`,
			run:    runTasksAdd},
		{name: toolTasksUpdate, desc: "Update a checklist task by id (or exact title): status, passes (verified), title or detail.",
			schema: `{"type":"object","properties":{"id":{"type":"string","minLength":1,"maxLength":300},"status":{"type":"string","enum":["todo","doing","done","blocked"]},"passes":{"type":"boolean"},"title":{"type":"string","minLength":1,"maxLength":300},"detail":{"type":"string","maxLength":4000}},"required":["id"],"additionalProperties":false}`,
			run:    runTasksUpdate},
		{name: toolTasksList, desc: "List the run's checklist with ids and statuses.",
			schema: `{"type":"object","properties":{},"additionalProperties":false}`,
			run:    runTasksList},
		{name: toolAskUser, desc: "Ask the person questions you cannot answer yourself and that block the work. Ends this iteration; the run waits for their answers.",
			schema: `{"type":"object","properties":{"questions":{"type":"array","items":{"type":"string","minLength":1,"maxLength":1000},"minItems":1,"maxItems":10},"context":{"type":"string","maxLength":2000}},"required":["questions"],"additionalProperties":false}`,
			run:    runAskUser},
		{name: toolDelegate, desc: fmt.Sprintf("Fan out up to %d independent sub-tasks to executor agents that work in parallel, each writing its documents under branches/<id>/. Returns each branch's result.", maxDelegatedTasks),
			schema: fmt.Sprintf(`{"type":"object","properties":{"tasks":{"type":"array","minItems":1,"maxItems":%d,"items":{"type":"object","properties":{"id":{"type":"string","maxLength":40},"title":{"type":"string","minLength":1,"maxLength":200},"instructions":{"type":"string","minLength":1,"maxLength":8000}},"required":["title","instructions"],"additionalProperties":false}}},"required":["tasks"],"additionalProperties":false}`, maxDelegatedTasks),
			run:    runDelegate},
		{name: toolReportStatus, desc: "Report this iteration's status. Call it exactly once, as your last action. Set exit_signal true only when the whole objective is met, with concrete completion_evidence; the platform verifies it.",
			schema: `{"type":"object","properties":{"exit_signal":{"type":"boolean"},"needs_user_input":{"type":"boolean"},"blocking_questions":{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":10},"progress_summary":{"type":"string","minLength":1,"maxLength":4000},"remaining_work":{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":30},"completion_evidence":{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":30},"next_action_hint":{"type":"string","maxLength":500},"confidence":{"type":"string","enum":["low","medium","high"]}},"required":["exit_signal","progress_summary"],"additionalProperties":false}`,
			run:    runReportStatus},
		{name: toolFinish, desc: "Finish your sub-task: give a concise result for the planner (what you found, where you wrote it).",
			schema: `{"type":"object","properties":{"result":{"type":"string","minLength":1,"maxLength":8000}},"required":["result"],"additionalProperties":false}`,
			run:    runFinish},
	}
	if e.opts.WebFetch.Enabled {
		defs = append(defs, &tool{name: toolWebFetch, desc: "Fetch a web page or text document over HTTP(S) from an allowed host and return its text. Allowed hosts: " + strings.Join(e.opts.WebFetch.AllowHosts, ", ") + ".",
			schema: `{"type":"object","properties":{"url":{"type":"string","minLength":8,"maxLength":2000}},"required":["url"],"additionalProperties":false}`,
			run:    runWebFetch})
	}
	c := jsonschema.NewCompiler()
	out := make(map[string]*tool, len(defs))
	for _, t := range defs {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(t.schema))
		if err != nil {
			return nil, fmt.Errorf("tool %s schema: %w", t.name, err)
		}
		loc := "mem:///tools/" + t.name + ".json"
		if err := c.AddResource(loc, doc); err != nil {
			return nil, fmt.Errorf("tool %s schema: %w", t.name, err)
		}
		if t.sch, err = c.Compile(loc); err != nil {
			return nil, fmt.Errorf("tool %s schema: %w", t.name, err)
		}
		t.params = json.RawMessage(t.schema)
		out[t.name] = t
	}
	return out, nil
}

// plannerTools returns the tools of a planner turn in a stable order.
func (e *Executor) plannerTools(planPhase bool) []*tool {
	names := []string{toolList, toolRead, toolWrite, toolScratchpad, toolSearch, toolTasksAdd, toolTasksUpdate,
		toolTasksList, toolAskUser, toolDelegate, toolWebFetch, toolReportStatus}
	if planPhase {
		names = []string{toolList, toolRead, toolWrite, toolScratchpad, toolSearch, toolTasksList, toolAskUser,
			toolWebFetch, toolReportStatus}
	}
	return e.pick(names)
}

func (e *Executor) branchTools() []*tool {
	return e.pick([]string{toolList, toolRead, toolWrite, toolSearch, toolWebFetch, toolFinish})
}

func (e *Executor) pick(names []string) []*tool {
	var out []*tool
	for _, n := range names {
		if t, ok := e.tools[n]; ok {
			out = append(out, t)
		}
	}
	return out
}

func runList(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct{ Prefix string }
	json.Unmarshal(args, &a)
	docs, err := sc.it.e.store.ListRunDocuments(ctx, sc.it.in.UserID, sc.it.in.RunID)
	if err != nil {
		return "", err
	}
	prefix := strings.Trim(strings.TrimSpace(a.Prefix), "/")
	var b strings.Builder
	n := 0
	for _, d := range docs {
		if prefix != "" && d.Path != prefix && !strings.HasPrefix(d.Path, prefix+"/") {
			continue
		}
		if n++; n > 200 {
			b.WriteString("… more documents not shown; narrow with prefix\n")
			break
		}
		p := d.Path
		if p == "" {
			p = "/ (root)"
		}
		fmt.Fprintf(&b, "%s  [%s, %d chars] %s\n", p, d.Kind, len(d.Content), d.Title)
	}
	if n == 0 && prefix != "" {
		return "no documents under " + prefix, nil
	}
	return b.String(), nil
}

func runRead(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct {
		Path   string
		Offset int
	}
	json.Unmarshal(args, &a)
	p, err := cleanPath(sc.it.in.RunID, a.Path)
	if err != nil {
		return "", err
	}
	d, err := sc.it.e.store.FindRunDocumentByPath(ctx, sc.it.in.UserID, sc.it.in.RunID, p)
	if spec.ErrorCode(err) == spec.ENOTFOUND && sc.prefix != "" {
		// A branch may name its own documents relative to its folder.
		d, err = sc.it.e.store.FindRunDocumentByPath(ctx, sc.it.in.UserID, sc.it.in.RunID, sc.prefix+p)
	}
	if spec.ErrorCode(err) == spec.ENOTFOUND {
		return "", toolErrorf("no document at %s; call %s to see the workspace", p, toolList)
	} else if err != nil {
		return "", err
	}
	const chunk = 8000
	content := d.Content
	if a.Offset >= len(content) && a.Offset > 0 {
		return "", toolErrorf("offset %d is past the end (%d chars)", a.Offset, len(content))
	}
	end := min(len(content), a.Offset+chunk)
	out := fmt.Sprintf("# %s (%s, %d chars)\n\n%s", d.Path, d.Kind, len(content), content[a.Offset:end])
	if end < len(content) {
		out += fmt.Sprintf("\n\n[… %d more chars; read again with offset %d]", len(content)-end, end)
	}
	return out, nil
}

func runWrite(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct {
		Path, Content, Title, Description string
		Tags                              []string
	}
	json.Unmarshal(args, &a)
	p, err := cleanPath(sc.it.in.RunID, a.Path)
	if err != nil {
		return "", err
	}
	if sc.prefix != "" && !strings.HasPrefix(p+"/", sc.prefix) {
		p = sc.prefix + p
	}
	switch {
	case p == scratchpadPath:
		return "", toolErrorf("scratchpad.md is append-only: use %s", toolScratchpad)
	case strings.HasPrefix(p, scratchpadFolder+"/"), strings.HasPrefix(p, iterationsFolder+"/"), p == scratchpadFolder, p == iterationsFolder:
		return "", toolErrorf("%s is kept by the platform and cannot be written", p)
	}
	if err := sc.it.allowWrite(p); err != nil {
		return "", err
	}
	kind := spec.DocNote
	if p == planPath {
		kind = spec.DocPlan
	}
	title := strings.TrimSpace(a.Title)
	if title == "" {
		title = titleOf(p, a.Content)
	}
	doc := &spec.Document{Path: p, Kind: kind, Title: title, Description: a.Description, Content: a.Content, Tags: a.Tags}
	created, err := sc.it.putDoc(ctx, doc)
	if err != nil {
		return "", err
	}
	if created {
		return fmt.Sprintf("created %s (%d chars)", p, len(a.Content)), nil
	}
	return fmt.Sprintf("updated %s (%d chars)", p, len(a.Content)), nil
}

func titleOf(p, content string) string {
	for _, line := range strings.SplitN(content, "\n", 20) {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "# "); ok && strings.TrimSpace(t) != "" {
			return truncate(strings.TrimSpace(t), 200)
		}
	}
	base := p[strings.LastIndex(p, "/")+1:]
	return strings.TrimSuffix(base, ".md")
}

func runScratchpad(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct{ Text, Heading string }
	json.Unmarshal(args, &a)
	return sc.it.appendScratchpad(ctx, a.Heading, a.Text)
}

func runSearch(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct {
		Query string
		Limit int
	}
	json.Unmarshal(args, &a)
	if a.Limit == 0 {
		a.Limit = 10
	}
	hits, err := sc.it.e.store.SearchDocuments(ctx, sc.it.in.UserID, "", a.Query, a.Limit)
	if spec.ErrorCode(err) == spec.EINVALID {
		return "", toolErrorf("%s", spec.ErrorMessage(err))
	} else if err != nil {
		return "", err
	}
	if len(hits) == 0 {
		return "no matches for " + a.Query, nil
	}
	var b strings.Builder
	for _, h := range hits {
		where := "this run"
		if h.Document.RunID != sc.it.in.RunID {
			where = "run " + h.Document.RunID
		}
		fmt.Fprintf(&b, "- %s (%s): %s — %s\n", h.Document.Path, where, h.Document.Title, oneLine(h.Snippet))
	}
	return b.String(), nil
}

func runTasksAdd(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct{ Title, Detail, Status string }
	json.Unmarshal(args, &a)
	if err := sc.it.allowTasks(); err != nil {
		return "", err
	}
	t := &spec.Task{RunID: sc.it.in.RunID, Title: strings.TrimSpace(a.Title), Detail: a.Detail, Status: a.Status}
	err := sc.it.writeTx(ctx, func(tx spec.Tx) error {
		if err := tx.InsertTask(ctx, t); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, t.RunID, spec.EventTaskUpdated, taskEvent(t, true))
		return err
	})
	if err != nil {
		return "", err
	}
	sc.it.noteTask(t, true)
	return fmt.Sprintf("added task %s [%s] %s", t.ID, t.Status, t.Title), nil
}

func runTasksUpdate(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct {
		ID, Status, Title string
		Detail            *string
		Passes            *bool
	}
	json.Unmarshal(args, &a)
	if err := sc.it.allowTasks(); err != nil {
		return "", err
	}
	var t *spec.Task
	err := sc.it.writeTx(ctx, func(tx spec.Tx) error {
		tasks, err := tx.ListTasks(ctx, sc.it.in.RunID)
		if err != nil {
			return err
		}
		t = nil
		for _, x := range tasks {
			if x.ID == strings.TrimSpace(a.ID) || (t == nil && strings.EqualFold(x.Title, strings.TrimSpace(a.ID))) {
				t = x
			}
		}
		if t == nil {
			return toolErrorf("no task %q; call %s for ids", a.ID, toolTasksList)
		}
		if a.Status != "" {
			t.Status = a.Status
		}
		if a.Title != "" {
			t.Title = a.Title
		}
		if a.Detail != nil {
			t.Detail = *a.Detail
		}
		if a.Passes != nil {
			t.Passes = *a.Passes
		}
		if err := tx.UpdateTask(ctx, t); err != nil {
			return err
		}
		_, err = tx.AppendEvent(ctx, t.RunID, spec.EventTaskUpdated, taskEvent(t, false))
		return err
	})
	if err != nil {
		return "", err
	}
	sc.it.noteTask(t, false)
	return fmt.Sprintf("updated task %s [%s] passes=%v %s", t.ID, t.Status, t.Passes, t.Title), nil
}

func taskEvent(t *spec.Task, created bool) spec.TaskData {
	return spec.TaskData{TaskID: t.ID, Title: t.Title, Status: t.Status, Passes: t.Passes, Created: created}
}

func runTasksList(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	tasks, err := sc.it.e.store.ListTasks(ctx, sc.it.in.UserID, sc.it.in.RunID)
	if err != nil {
		return "", err
	}
	if len(tasks) == 0 {
		return "the checklist is empty", nil
	}
	return formatTasks(tasks, 200, 20000), nil
}

func formatTasks(tasks []*spec.Task, maxN, maxChars int) string {
	var b strings.Builder
	for i, t := range tasks {
		if i == maxN || b.Len() > maxChars {
			fmt.Fprintf(&b, "… %d more tasks\n", len(tasks)-i)
			break
		}
		pass := ""
		if t.Passes {
			pass = " (passes)"
		}
		fmt.Fprintf(&b, "- %s [%s]%s %s\n", t.ID, t.Status, pass, truncate(t.Title, 200))
	}
	return b.String()
}

func runAskUser(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct {
		Questions []string
		Context   string
	}
	json.Unmarshal(args, &a)
	summary := strings.TrimSpace(a.Context)
	if summary == "" {
		summary = fmt.Sprintf("Waiting for the person to answer %d question(s).", len(a.Questions))
	}
	sc.status = &spec.Status{NeedsUserInput: true, BlockingQuestions: a.Questions, ProgressSummary: summary,
		NextActionHint: "ask_user"}
	sc.done = true
	return "the questions were sent to the person; this iteration ends now", nil
}

func runReportStatus(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var st spec.Status
	if err := json.Unmarshal(args, &st); err != nil {
		return "", toolErrorf("bad status: %v", err)
	}
	sc.status = &st
	sc.done = true
	return "status recorded; this iteration ends now", nil
}

func runFinish(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct{ Result string }
	json.Unmarshal(args, &a)
	sc.result = a.Result
	sc.done = true
	return "done", nil
}

func runDelegate(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	if sc.prefix != "" {
		return "", toolErrorf("branches cannot delegate further")
	}
	var a struct {
		Tasks []branchTask
	}
	json.Unmarshal(args, &a)
	return sc.it.delegate(ctx, a.Tasks), nil
}

func runWebFetch(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
	var a struct{ URL string }
	json.Unmarshal(args, &a)
	wf := sc.it.e.opts.WebFetch
	u, err := url.Parse(strings.TrimSpace(a.URL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", toolErrorf("not an http(s) URL: %s", a.URL)
	}
	if !hostAllowed(u.Hostname(), wf.AllowHosts) {
		return "", toolErrorf("host %s is not on this server's web_fetch allow-list (%s)", u.Hostname(), strings.Join(wf.AllowHosts, ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, wf.Timeout)
	defer cancel()
	client := *sc.it.e.opts.HTTPClient
	client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		if !hostAllowed(req.URL.Hostname(), wf.AllowHosts) {
			return fmt.Errorf("redirect to %s is not allowed", req.URL.Hostname())
		}
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", toolErrorf("bad request: %v", err)
	}
	req.Header.Set("Accept", "text/html, text/plain, text/markdown, application/json;q=0.9, */*;q=0.1")
	req.Header.Set("User-Agent", "homework/1 (+web_fetch)")
	resp, err := client.Do(req)
	if err != nil {
		return "", toolErrorf("fetch failed: %s", truncate(oneLine(err.Error()), 300))
	}
	defer resp.Body.Close()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	textual := strings.HasPrefix(mt, "text/") || mt == "application/json" || mt == "application/xml" ||
		mt == "application/xhtml+xml" || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") || mt == ""
	if !textual {
		return "", toolErrorf("%s is %s, not text; web_fetch returns text only", u, mt)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, wf.MaxBytes+1))
	if err != nil {
		return "", toolErrorf("reading the response failed: %v", err)
	}
	cut := int64(len(body)) > wf.MaxBytes
	if cut {
		body = body[:wf.MaxBytes]
	}
	text := string(body)
	if strings.Contains(mt, "html") {
		text = htmlText(text)
	}
	text = strings.TrimSpace(text)
	out := fmt.Sprintf("HTTP %d %s (%s)\n\n%s", resp.StatusCode, u, mt, truncate(text, 12000))
	if cut {
		out += fmt.Sprintf("\n\n[response cut at %d bytes]", wf.MaxBytes)
	}
	return out, nil
}

func hostAllowed(host string, allow []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, a := range allow {
		a = strings.ToLower(strings.TrimSpace(a))
		if a != "" && (host == a || strings.HasSuffix(host, "."+a)) {
			return true
		}
	}
	return false
}
