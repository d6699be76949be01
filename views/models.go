package views

import (
	"sort"
	"strings"
	"time"

	"homework/engine/spec"
)

// AuthData is the sign-in and first-account forms.
type AuthData struct {
	Page
	Email string
	Next  string
	// FormCSRF is the double-submit token of the pre-session forms.
	FormCSRF string
	Error    string
	Errors   map[string]string
	// Notice warns before the form is sent, such as when the browser will
	// not return its cookies.
	Notice string
}

// RunListData is the run list page and its live fragment.
type RunListData struct {
	Page
	Filter     RunListFilter
	Runs       []*spec.Run
	Status     string // the status filter; "" for all
	Tag        string // the tag filter; "" for all
	Cursor     string // the cursor of this page; "" for the first
	NextCursor string
	Counts     map[string]int
	Running    int
	MaxRunning int
	Queued     int
}

// RunListFilter is the run list's search, filters and order as typed in
// the query string.
type RunListFilter struct {
	Query    string
	Status   string
	Executor string
	StopType string
	From, To string // YYYY-MM-DD
	Sort     string
	Tag      string
}

// params returns the filter's non-empty query parameters in a fixed order.
func (f RunListFilter) params() [][2]string {
	var out [][2]string
	for _, p := range [][2]string{{"status", f.Status}, {"q", f.Query}, {"executor", f.Executor}, {"stop", f.StopType},
		{"from", f.From}, {"to", f.To}, {"tag", f.Tag}, {"sort", f.Sort}} {
		if p[1] != "" {
			out = append(out, p)
		}
	}
	return out
}

// URL returns path with the filter's parameters and, when set, a cursor.
func (f RunListFilter) URL(path, cursor string) string {
	params := f.params()
	if cursor != "" {
		params = append(params, [2]string{"cursor", cursor})
	}
	var b strings.Builder
	b.WriteString(path)
	for i, p := range params {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(p[0] + "=" + queryEscape(p[1]))
	}
	return b.String()
}

// With returns the filter with one more parameter changed.
func (f RunListFilter) With(name, value string) RunListFilter {
	switch name {
	case "status":
		f.Status = value
	case "sort":
		f.Sort = value
	}
	return f
}

// Active reports whether anything narrows the list.
func (f RunListFilter) Active() bool {
	return f.Query != "" || f.Status != "" || f.Executor != "" || f.StopType != "" || f.From != "" || f.To != ""
}

// Count is how many filters other than the search words narrow or order
// the list (the count shown on the folded filters).
func (f RunListFilter) Count() int {
	n := 0
	for _, v := range []string{f.Status, f.Executor, f.StopType, f.From, f.To, f.Tag, f.Sort} {
		if v != "" {
			n++
		}
	}
	return n
}

// FragmentURL is the URL the live run list re-fetches.
func (d RunListData) FragmentURL() string {
	u := "/runs/fragment?status=" + queryEscape(d.Status)
	for _, p := range d.Filter.params() {
		if p[0] != "status" {
			u += "&" + p[0] + "=" + queryEscape(p[1])
		}
	}
	if d.Cursor != "" {
		u += "&cursor=" + queryEscape(d.Cursor)
	}
	if d.Tag != "" {
		u += "&tag=" + queryEscape(d.Tag)
	}
	return u
}

// ComposerForm holds the composer's inputs as typed, so that a rejected form
// is shown again unchanged.
type ComposerForm struct {
	Objective     string
	Mode          string
	Model         string
	Executor      string
	MaxIterations string
	MaxMinutes    string
	MaxCostUSD    string
	MaxTokens     string
	OnForecast    string
	WriteMode     string
	Token         string
	CheckCommands string // one command per line, shell-split
	PatternName   string
	Pattern       string
	PatternTarget string
	TasksAllDone  bool
	DocExists     string
	NoProgress    string
	RepeatedError string
	AgentArgv     string
	AgentWorkdir  string
	AgentPreset   string
	AgentFormat   string // agent.output_format
	AgentResume   bool
	ParentRunID   string
	Script        string
	Tags          string // comma-separated
	MCPServers    []string
}

// ComposerData is the composer page.
type ComposerData struct {
	Page
	Form          ComposerForm
	Errors        map[string]string // by form field name
	Error         string            // a problem not tied to one field
	LLMConfigured bool
	DefaultModel  string
	// DefaultMinutes is the running-time budget of a run that sets none.
	DefaultMinutes int
	CommandRuns    bool // the user may start command runs
	ScriptRuns     bool // the scripted test executor is available
	Parent         *spec.Run
	// AdvancedOpen opens the Advanced section (a field in it was refused).
	AdvancedOpen bool
	// AgentPresets and AgentFormats are the command agent's choices.
	AgentPresets []AgentPreset
	AgentFormats []string
	// Price is what the form's run would be priced at.
	Price PricePreview
	// MCPServers are the MCP servers the user may offer a model run.
	MCPServers []MCPServerChoice
}

// MCPServerChoice is an MCP server in the composer.
type MCPServerChoice struct {
	Name      string
	Type      string   // stdio, http or sse
	AdminOnly bool     // only admins see it
	Tools     []string // as a run last listed them; nil when none has
}

// Hint describes the server beside its checkbox: its transport, whether it
// is for admins only, and its tools.
func (m MCPServerChoice) Hint() string {
	s := m.Type
	if m.AdminOnly {
		s += ", admins only"
	}
	if m.Tools == nil {
		return s + ": its tools are listed once a run has used it"
	}
	if len(m.Tools) == 0 {
		return s + ": no tools"
	}
	return s + ": " + strings.Join(m.Tools, ", ")
}

// AgentPreset is a known agent CLI's headless invocation.
type AgentPreset struct {
	Name, Label  string
	Argv         string // shell-style
	OutputFormat string
}

// IterationView is one row of a run's timeline.
type IterationView struct {
	Iteration int
	Attempt   int
	Status    string
	Summary   string
	Error     string
	StartedAt time.Time
	EndedAt   time.Time
	Decision  string
	Reasons   []string
	Checks    []spec.CheckResult
	Metrics   spec.Metrics
	Created   []spec.Ref
	Updated   []spec.Ref
	// Transcript is the size of the iteration's transcript.
	Transcript spec.TranscriptInfo
	// Inbox is how many of the person's answers and messages it read.
	Inbox int
	// Actions are what the person and the platform did while this was the
	// run's latest iteration.
	Actions []*Action
}

// LogPage is a batch of an iteration's log for the run page: the blocks
// after what the page shows, their lines numbered on from there.
type LogPage struct {
	RunID     string
	Iteration int
	Blocks    []LogBlock
	// More is set when the transcript has records after the batch.
	More bool
	Info spec.TranscriptInfo
}

// LogBlock is one piece of an iteration's log: a transcript record, or
// chunks of one output stream that continue one another, shown as a
// terminal shows them.
type LogBlock struct {
	// First is the block's first record (its kind, who and time).
	First *spec.TranscriptLine
	// AfterSeq is the seq before the block's first record and LastSeq its
	// last record's.
	AfterSeq, LastSeq int64
	// From is how many lines of the iteration's log come before the block:
	// its lines are numbered From+1 on.
	From int
	// Lines are the block's lines as safe HTML (terminal-to-html's output,
	// sanitised by the handler).
	Lines []string
	// Open is set when the block's output ended mid-line: the page fetches
	// it again, with what follows, when the transcript grows.
	Open bool
}

// Action is one entry of the run's timeline besides its iterations: a
// question, an answer, a message, a stop, a Continue, a cancel, a recovery.
type Action struct {
	At   time.Time
	Kind string // the event type
	Text string
}

// Evidence is a breaker's evidence (spec.Evidence) as shown on a stopped
// run.
type Evidence struct {
	Breaker       string   `json:"breaker"`
	Threshold     int      `json:"threshold"`
	Fingerprints  []string `json:"fingerprints,omitempty"`
	LastFailures  []string `json:"last_failures,omitempty"`
	LastSummaries []string `json:"last_summaries,omitempty"`
	Pattern       string   `json:"pattern,omitempty"`
}

// DocNode is a node of the research tree.
type DocNode struct {
	Doc      *spec.Document
	Children []*DocNode
}

// RunView is everything the run page shows.
type RunView struct {
	Page
	Run        *spec.Run
	Config     *spec.Config
	Iterations []IterationView
	Tree       []*DocNode
	Tasks      []*spec.Task
	Report     *spec.Report
	// ReportHTML is the report summary rendered from markdown and sanitised.
	ReportHTML string
	Evidence   *Evidence
	// Forecast is the next iteration's forecast (nil: none).
	Forecast *spec.Forecast
	Created  []spec.Ref
	Updated  []spec.Ref
	// LastSeq is the run's last event sequence number; the live stream
	// starts after it.
	LastSeq int64
	// TimelineFrom is the first iteration the timeline shows; its live
	// refresh keeps every row from there on.
	TimelineFrom int
	// EarlierBefore is where "Show earlier" continues (0: nothing earlier).
	EarlierBefore int
	// TimelineTail marks a live timeline update: the first row replaces
	// the page's last row (out of band), the others are appended.
	TimelineTail bool
	// Error is a refused control's message, shown above the controls.
	Error      string
	ErrorField string
	// Modal data.
	Scratchpad *spec.Document
	Events     []*spec.Event
	Branch     string
	Now        time.Time
}

// StopType returns the run's stop reason type, or "".
func (v RunView) StopType() string {
	if v.Run.StopReason == nil {
		return ""
	}
	return v.Run.StopReason.Type
}

// DocumentData is one rendered document.
type DocumentData struct {
	Page
	Run  *spec.Run
	Doc  *spec.Document
	HTML string // sanitised HTML rendered from the markdown
}

// NotificationsData is the notifications page.
type NotificationsData struct {
	Page
	Items []*spec.Notification
	// Groups are Items by run (GroupNotifications), each with its run.
	Groups []*NotificationGroup
	Before int64 // the next page's cursor, 0 when none
}

// ReportRow is one finished run on the reports page.
type ReportRow struct {
	Run   *spec.Run
	Title string
}

// ReportsData is the reports page.
type ReportsData struct {
	Page
	Rows       []ReportRow
	NextCursor string
	Effect     *EffectData // the effectiveness report above the list
}

// BudgetRow is one budget's use on the run page.
type BudgetRow struct {
	Name    string
	Used    string
	Limit   string
	Percent int
	Over    bool
}

// Budgets returns the run's use of each budget that has a limit.
func (v RunView) Budgets() []BudgetRow {
	if v.Config == nil {
		return nil
	}
	b, m := v.Config.Budgets, v.Run.Metrics
	var out []BudgetRow
	add := func(name, used, limit string, u, l float64) {
		if l > 0 {
			out = append(out, BudgetRow{Name: name, Used: used, Limit: limit, Percent: percent(u, l), Over: u >= l})
		}
	}
	add("Iterations", itoa(m.Iterations), itoa(b.MaxIterations), float64(m.Iterations), float64(b.MaxIterations))
	add("Time", Duration(time.Duration(m.RunningMS)*time.Millisecond), Duration(time.Duration(b.MaxRunningMS)*time.Millisecond),
		float64(m.RunningMS), float64(b.MaxRunningMS))
	add("Cost", CostText(v), Dollars(b.MaxCostUSD), m.CostTotalUSD, b.MaxCostUSD)
	add("Tokens", Count(m.TokensTotal), Count(b.MaxTotalTokens), float64(m.TokensTotal), float64(b.MaxTotalTokens))
	add("Tool calls", itoa(m.ToolCallsTotal), itoa(b.MaxToolCalls), float64(m.ToolCallsTotal), float64(b.MaxToolCalls))
	return out
}

// ModelRow is one model's share of a run's usage.
type ModelRow struct {
	Model string
	spec.ModelUsage
}

// Models returns the per-model usage, by cost then name.
func (v RunView) Models() []ModelRow {
	var out []ModelRow
	for k, u := range v.Run.Metrics.ByModel {
		out = append(out, ModelRow{Model: k, ModelUsage: u})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CostUSD != out[j].CostUSD {
			return out[i].CostUSD > out[j].CostUSD
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// Duration returns how long the run has existed until it ended (or now).
// EndedAt is when the run ended: its completion, or for a stopped run
// (which Continue may resume, so it has no completion) its last change,
// the stop; zero while it has not ended.
func (v RunView) EndedAt() time.Time {
	if !v.Run.CompletedAt.IsZero() || v.Run.Status != spec.StatusStopped {
		return v.Run.CompletedAt
	}
	return v.Run.UpdatedAt
}

// StopDetail is the stop reason's detail, as the engine wrote it (its
// amounts keep three significant digits below a dollar).
func (v RunView) StopDetail() string {
	if v.Run.StopReason == nil {
		return ""
	}
	return v.Run.StopReason.Detail
}

func (v RunView) Duration() time.Duration {
	start := v.Run.StartedAt
	if start.IsZero() {
		return 0
	}
	end := v.Run.CompletedAt
	if end.IsZero() && v.Run.Status != spec.StatusRunning && v.Run.Status != spec.StatusQueued {
		end = v.Run.UpdatedAt
	}
	if end.IsZero() {
		end = v.Now
	}
	return end.Sub(start)
}
