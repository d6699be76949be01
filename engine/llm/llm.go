// Package llm is the planner/executor executor over an OpenAI-compatible
// chat-completions endpoint (OpenAI, OpenRouter, Ollama, vLLM, LM Studio).
//
// Each iteration assembles a bounded context from the run's state (objective,
// permissions, scratchpad digest, tasks, the gate's last feedback, the inbox,
// recent summaries) and runs a tool-calling loop over the run's research
// workspace and checklist until the model calls report_status, asks the
// person, hits its tool-call bound or the iteration's deadline. The platform,
// not this package, decides what happens next.
//
// Permissions: in read_only runs the model may append to the scratchpad and
// write documents under notes/ only; task changes and every other write are
// refused. In approve_plan runs the first iteration may write plan.md (and
// notes) only, then asks the engine to wait for the person's approval.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sashabaranov/go-openai"

	"homework/engine/mcp"
	"homework/engine/spec"
)

// Roles of model calls, as recorded in llm_calls.
const (
	RolePlanner    = "planner"
	RoleExecutor   = "executor"
	RoleRepair     = "repair"
	RoleSummarizer = "summarizer"
)

// WebFetchOptions configure the web_fetch tool.
type WebFetchOptions struct {
	// Enabled registers the tool; it is off by default.
	Enabled bool
	// AllowHosts lists the hosts that may be fetched; a host also allows
	// its subdomains. Empty allows none.
	AllowHosts []string
	// MaxBytes caps a response body; 512 KiB when zero.
	MaxBytes int64
	// Timeout bounds one fetch; 20 s when zero.
	Timeout time.Duration
}

// Options configure New.
type Options struct {
	// Store is read outside transactions, and its WriteTx runs the
	// executor's writes; required.
	Store spec.Store
	// BaseURL is the endpoint, normalised to end in /v1. When empty and
	// APIKey is set, OpenAI's endpoint is used.
	BaseURL string
	// APIKey is sent as a bearer token; may be empty for local endpoints.
	APIKey string
	// DefaultModel is used when a run names no model.
	DefaultModel string
	// HTTPClient makes the model calls (and web fetches); a plain client
	// when nil. Deadlines come from the iteration's context.
	HTTPClient *http.Client
	// Prices prices every call; DefaultPrices when nil.
	Prices PriceTable
	// WebFetch configures the web_fetch tool.
	WebFetch WebFetchOptions
	// MaxParallelBranches bounds how many delegated sub-tasks run at once;
	// 3 when zero.
	MaxParallelBranches int
	// RetryMax is how many times a retryable model error (408, 429, 5xx,
	// network) is retried; 3 when zero, none when negative.
	RetryMax int
	// RetryBaseDelay is the first backoff delay, doubled per attempt; 1 s
	// when zero. A Retry-After header takes precedence.
	RetryBaseDelay time.Duration
	// MaxRetryDelay caps one backoff wait, Retry-After included; 60 s when zero.
	MaxRetryDelay time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger logs internal failures; discarded when nil.
	Logger *slog.Logger

	// DefaultToolCalls bounds an iteration's tool calls when the run sets no
	// budgets.iteration_tool_calls; 25 when zero.
	DefaultToolCalls int
	// BranchToolCalls bounds each delegated sub-task's tool calls; 12 when zero.
	BranchToolCalls int
	// ScratchpadMaxBytes is the size past which scratchpad.md is rolled over
	// into scratchpad/NNN.md; 16 KiB when zero.
	ScratchpadMaxBytes int
	// MaxContextChars caps the assembled iteration context; 24,000 when zero.
	MaxContextChars int

	// MCP is the operator's MCP servers, which runs may name in
	// mcp_servers; nil when none are configured.
	MCP *mcp.Config

	// RecordNarration stores the summarizer's usage for Narrate, which has
	// no spec.Host. When nil, the call is inserted into llm_calls directly
	// (see StoreNarrationRecorder); the engine may pass its own to also
	// update the run's totals.
	RecordNarration func(ctx context.Context, run *spec.Run, c spec.LLMCall) error
}

// Executor is the LLM executor. It implements the engine's Executor,
// ConfigValidator and Narrator interfaces and is safe for concurrent use by
// many iterations. It is the engine's RunStarter too: the workspace is
// created in the transaction that starts the run.
type Executor struct {
	store      spec.Store
	client     *openai.Client
	opts       Options
	configured bool
	log        *slog.Logger
	tools      map[string]*tool
}

// NewHTTPClient returns the HTTP client model calls use unless
// Options.HTTPClient sets one. Concurrent iterations (and their branches)
// call one endpoint: it keeps an idle connection for each, not
// DefaultTransport's two, which closes the others after every call and
// dials (for HTTPS, handshakes) anew.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = t.MaxIdleConns
	return &http.Client{Transport: t}
}

// New returns an Executor for opts, filling in defaults.
func New(opts Options) (*Executor, error) {
	if opts.Store == nil {
		return nil, errors.New("llm: Options.Store is required")
	}
	configured := opts.BaseURL != "" || opts.APIKey != ""
	base := NormalizeBaseURL(opts.BaseURL)
	if base == "" {
		base = "https://api.openai.com/v1"
	}
	opts.BaseURL = base
	if opts.HTTPClient == nil {
		opts.HTTPClient = NewHTTPClient()
	}
	if opts.Prices == nil {
		opts.Prices = DefaultPrices()
	}
	if opts.WebFetch.MaxBytes <= 0 {
		opts.WebFetch.MaxBytes = 512 << 10
	}
	if opts.WebFetch.Timeout <= 0 {
		opts.WebFetch.Timeout = 20 * time.Second
	}
	if opts.MaxParallelBranches <= 0 {
		opts.MaxParallelBranches = 3
	}
	if opts.RetryMax == 0 {
		opts.RetryMax = 3
	} else if opts.RetryMax < 0 {
		opts.RetryMax = 0
	}
	if opts.RetryBaseDelay <= 0 {
		opts.RetryBaseDelay = time.Second
	}
	if opts.MaxRetryDelay <= 0 {
		opts.MaxRetryDelay = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultToolCalls <= 0 {
		opts.DefaultToolCalls = 25
	}
	if opts.BranchToolCalls <= 0 {
		opts.BranchToolCalls = 12
	}
	if opts.ScratchpadMaxBytes <= 0 {
		opts.ScratchpadMaxBytes = 16 << 10
	}
	if opts.MaxContextChars <= 0 {
		opts.MaxContextChars = 24000
	}

	cc := openai.DefaultConfig(opts.APIKey)
	cc.BaseURL = base
	cc.HTTPClient = headerCapture{next: opts.HTTPClient}
	e := &Executor{
		store:      opts.Store,
		client:     openai.NewClientWithConfig(cc),
		opts:       opts,
		configured: configured,
		log:        opts.Logger,
	}
	if e.opts.RecordNarration == nil {
		e.opts.RecordNarration = StoreNarrationRecorder(opts.Store)
	}
	tools, err := e.buildTools()
	if err != nil {
		return nil, err
	}
	e.tools = tools
	return e, nil
}

// NormalizeBaseURL trims s and makes it end in /v1 (go-openai appends
// /chat/completions to it): "http://localhost:11434" and
// "http://localhost:11434/v1/chat/completions" both become
// "http://localhost:11434/v1". An empty s stays empty.
func NormalizeBaseURL(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	s = strings.TrimRight(s, "/")
	s = strings.TrimSuffix(s, "/chat/completions")
	s = strings.TrimRight(s, "/")
	if !strings.HasSuffix(s, "/v1") {
		s += "/v1"
	}
	return s
}

// Configured reports whether a model endpoint was configured (a base URL or
// an API key).
func (e *Executor) Configured() bool { return e.configured }

// BaseURL returns the normalised endpoint.
func (e *Executor) BaseURL() string { return e.opts.BaseURL }

// Prices returns the executor's price table.
func (e *Executor) Prices() PriceTable { return e.opts.Prices }

// Model returns the model used for role (planner, executor, repair or
// summarizer) by a run with cfg: the role's model, else cfg.Model, else the
// server default. Repair calls use the planner's model.
func (e *Executor) Model(cfg *spec.Config, role string) string {
	if cfg != nil {
		if m := cfg.Models; m != nil {
			var s string
			switch role {
			case RolePlanner, RoleRepair:
				s = m.Planner
			case RoleExecutor:
				s = m.Executor
			case RoleSummarizer:
				s = m.Summarizer
			}
			if s = strings.TrimSpace(s); s != "" {
				return s
			}
		}
		if s := strings.TrimSpace(cfg.Model); s != "" {
			return s
		}
	}
	return strings.TrimSpace(e.opts.DefaultModel)
}

// ValidateConfig refuses an LLM run when no endpoint is configured
// (EUNAVAILABLE, field "executor"), no model can be resolved (EINVALID,
// field "model"), or it sets a cost budget while one of its models has no
// price (EINVALID, field "budgets.max_cost_usd"). It refuses an MCP server
// the server has not configured or names twice (EINVALID, field
// "mcp_servers[i]") and an admin_only one for others (EFORBIDDEN).
func (e *Executor) ValidateConfig(ctx context.Context, user *spec.User, cfg *spec.Config) error {
	if !e.configured {
		return &spec.Error{Code: spec.EUNAVAILABLE, Field: "executor", Message: "No model endpoint is configured on this server. " +
			"Start it with HOMEWORK_LLM_BASE_URL (an OpenAI-compatible endpoint such as https://api.openai.com/v1 or http://localhost:11434/v1), " +
			"HOMEWORK_LLM_API_KEY and HOMEWORK_LLM_MODEL set (OPENAI_BASE_URL and OPENAI_API_KEY also work)."}
	}
	for _, role := range []string{RolePlanner, RoleExecutor, RoleSummarizer} {
		if e.Model(cfg, role) == "" {
			return &spec.Error{Code: spec.EINVALID, Field: "model", Message: "No model given and the server has no default model: " +
				"set \"model\" on the run or start the server with HOMEWORK_LLM_MODEL."}
		}
	}
	if err := e.validateMCPServers(user, cfg); err != nil {
		return err
	}
	if cfg.Budgets.MaxCostUSD > 0 {
		// A cost budget over a model without a price would never bind.
		for _, role := range []string{RolePlanner, RoleExecutor, RoleSummarizer} {
			m := e.Model(cfg, role)
			if _, _, ok := e.opts.Prices.Lookup(m); !ok {
				return spec.FieldError("budgets.max_cost_usd", "The model %q (%s) has no known price, so a cost budget cannot be enforced. "+
					"Add the model to the price file (--prices FILE with {\"%s\": {\"input\": USD per 1M tokens, \"output\": USD per 1M tokens, \"cache_read\": …}}) "+
					"or leave out budgets.max_cost_usd.", m, role, m)
			}
		}
	}
	return nil
}

// StartRun creates the run's root workspace document (path "") and its
// scratchpad.md inside tx (any store's, or the engine's transaction that
// starts the run), appends their document_created events and sets
// run.WorkspaceDocID. It is idempotent.
func (e *Executor) StartRun(ctx context.Context, tx spec.Tx, run *spec.Run, cfg *spec.Config) error {
	objective := run.Objective
	if cfg != nil && cfg.Objective != "" {
		objective = cfg.Objective
	}
	return startRun(ctx, tx, run, objective)
}

func startRun(ctx context.Context, tx spec.Tx, run *spec.Run, objective string) error {
	root, err := ensureRoot(ctx, tx, run.ID, objective, nil)
	if err != nil {
		return err
	}
	run.WorkspaceDocID = root.ID
	if _, err := tx.FindDocumentByPath(ctx, run.ID, scratchpadPath); err == nil {
		return nil
	} else if spec.ErrorCode(err) != spec.ENOTFOUND {
		return err
	}
	sp := &spec.Document{RunID: run.ID, ParentID: root.ID, Path: scratchpadPath, Kind: spec.DocScratchpad,
		Title: "Scratchpad", Description: "Working notes, appended each iteration.",
		Content: "# Scratchpad\n"}
	if _, err := tx.PutDocument(ctx, sp); err != nil {
		return fmt.Errorf("create scratchpad: %w", err)
	}
	_, err = tx.AppendEvent(ctx, run.ID, spec.EventDocumentCreated, docEvent(sp))
	return err
}

// ensureRoot returns the run's root document, creating it (with its event)
// when missing. Created documents are appended to *created when non-nil.
func ensureRoot(ctx context.Context, tx spec.Tx, runID, objective string, created *[]*spec.Document) (*spec.Document, error) {
	root, err := tx.FindDocumentByPath(ctx, runID, "")
	if err == nil {
		return root, nil
	} else if spec.ErrorCode(err) != spec.ENOTFOUND {
		return nil, err
	}
	root = &spec.Document{RunID: runID, Path: "", Kind: spec.DocWorkspace, Title: rootTitle(objective),
		Description: truncate(objective, 500), Content: "# Objective\n\n" + objective + "\n"}
	if _, err := tx.PutDocument(ctx, root); err != nil {
		return nil, fmt.Errorf("create workspace root: %w", err)
	}
	if _, err := tx.AppendEvent(ctx, runID, spec.EventDocumentCreated, docEvent(root)); err != nil {
		return nil, err
	}
	if created != nil {
		*created = append(*created, root)
	}
	return root, nil
}

func rootTitle(objective string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(objective), "\n")
	if line == "" {
		return "Workspace"
	}
	return truncate(line, 100)
}

// docEvent is the data of document_created and document_updated events.
func docEvent(d *spec.Document) spec.DocumentData {
	return spec.DocumentData{DocumentID: d.ID, Path: d.Path, Kind: d.Kind, Title: d.Title,
		ParentID: d.ParentID, Iteration: d.Iteration, Size: len(d.Content)}
}

// StoreNarrationRecorder returns a RecordNarration func that inserts the
// call into llm_calls for the run's current iteration. It does not update
// the run's metrics; the engine passes its own recorder when it needs that.
func StoreNarrationRecorder(store spec.Store) func(ctx context.Context, run *spec.Run, c spec.LLMCall) error {
	return func(ctx context.Context, run *spec.Run, c spec.LLMCall) error {
		return store.WriteTx(ctx, func(tx spec.Tx) error {
			return tx.InsertLLMCall(ctx, &spec.LLMCall{RunID: run.ID, Iteration: run.Iteration, Role: c.Role, Model: c.Model,
				PromptTokens: c.PromptTokens, CompletionTokens: c.CompletionTokens, CostUSD: c.CostUSD, Priced: c.Priced,
				LatencyMS: c.LatencyMS, Error: c.Error})
		})
	}
}

// Narrate has the summarizer model write a 5–10 sentence narrative of a
// finished run from the report's structured parts. Its usage is recorded
// with role "summarizer" through Options.RecordNarration.
func (e *Executor) Narrate(ctx context.Context, run *spec.Run, cfg *spec.Config, report *spec.Report) (string, error) {
	model := e.Model(cfg, RoleSummarizer)
	if model == "" {
		return "", &spec.Error{Code: spec.EUNAVAILABLE, Field: "model", Message: "No summarizer model is configured."}
	}
	r := *report
	r.Summary, r.NarrativeError = "", ""
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return "", fmt.Errorf("marshal report: %w", err)
	}
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: narratorPrompt},
		{Role: openai.ChatMessageRoleUser, Content: truncate(string(b), 12000)},
	}
	rec := func(ctx context.Context, c spec.LLMCall) error { return e.opts.RecordNarration(ctx, run, c) }
	resp, err := e.chat(ctx, recordWith(rec), nil, RoleSummarizer, model, openai.ChatCompletionRequest{Model: model, Messages: msgs})
	if err != nil {
		return "", err
	}
	text := strings.TrimSpace(resp.Choices[0].Message.Content)
	if text == "" {
		return "", errors.New("summarizer returned an empty narrative")
	}
	return truncate(text, 4000), nil
}

const narratorPrompt = `You write the narrative summary of a finished background agent run for the person who asked for it.
Write 5 to 10 plain sentences, no headings, no lists, no markdown. Use only facts in the report you are given:
what the objective was, what was produced (name the key documents), how the run ended and why, what it cost,
and what remains or needs the person's attention. Do not invent results.`
