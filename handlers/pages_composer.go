package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/google/shlex"

	"homework/engine"
	"homework/engine/agentcmd"
	"homework/engine/mcp"
	"homework/engine/spec"
	"homework/views"
)

// composerData returns the composer for form f, its layout read from r.
func (s *Server) composerData(c *fiber.Ctx, r spec.ReadStore, f views.ComposerForm) views.ComposerData {
	u := userOf(c)
	title := "New run"
	if f.ParentRunID != "" {
		title = "Ask a follow-up"
	}
	return views.ComposerData{
		Page: s.pageFrom(c, r, title), Form: f, Errors: map[string]string{},
		LLMConfigured: s.opts.LLMConfigured, DefaultModel: s.opts.DefaultModel,
		DefaultMinutes: int(s.engine.DefaultRunningTime().Minutes()),
		CommandRuns:    s.opts.CommandRunsEnabled && u.IsAdmin, ScriptRuns: s.opts.ScriptRunsEnabled,
		AgentPresets: agentPresetViews(), AgentFormats: agentcmd.OutputFormats(),
		Price: s.pricePreview(u, f), MCPServers: mcpChoices(s.opts.MCP, u),
	}
}

// mcpChoices are the MCP servers u may check in the composer.
func mcpChoices(c *mcp.Config, u *spec.User) []views.MCPServerChoice {
	var out []views.MCPServerChoice
	for _, s := range mcpServersFor(c, u) {
		out = append(out, views.MCPServerChoice{Name: s.Name, Type: s.Type, AdminOnly: s.AdminOnly, Tools: s.Tools})
	}
	return out
}

// composer shows the run composer: empty, or with ?from=ID the settings of
// an earlier run ("Run again"), or with ?parent=ID its settings without the
// objective, linked to it ("Ask follow-up").
func (s *Server) composer(c *fiber.Ctx) error {
	f := views.ComposerForm{Mode: spec.ModeAuto, WriteMode: spec.WriteAutopilot}
	var parent *spec.Run
	from, asFollowUp := c.Query("from"), false
	if id := c.Query("parent"); id != "" {
		from, asFollowUp = id, true
	}
	var d views.ComposerData
	err := s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		if from != "" {
			src, err := r.FindRun(c.UserContext(), userOf(c).ID, from)
			if err != nil {
				return err
			}
			if cfg, err := engine.RunConfig(src); err == nil {
				f = formFromConfig(cfg)
			}
			if asFollowUp {
				parent = src
				f.Objective, f.ParentRunID = "", src.ID
			}
		}
		d = s.composerData(c, r, f)
		return nil
	})
	if err != nil {
		return s.pageError(c, err)
	}
	d.Parent = parent
	d.AdvancedOpen = from != "" && hasAdvanced(f)
	return s.render(c, fiber.StatusOK, views.Composer(d))
}

// hasAdvanced reports whether any input inside the Advanced section is set.
func hasAdvanced(f views.ComposerForm) bool {
	return f.MaxIterations != "" || f.MaxMinutes != "" || f.MaxCostUSD != "" || f.MaxTokens != "" || f.OnForecast != "" ||
		f.CheckCommands != "" || f.Pattern != "" || f.DocExists != "" || f.Token != "" || f.TasksAllDone ||
		f.NoProgress != "" || f.RepeatedError != "" || f.Script != "" || (f.WriteMode != "" && f.WriteMode != spec.WriteAutopilot)
}

// composerForm reads the composer's fields.
func composerForm(c *fiber.Ctx) views.ComposerForm {
	v := func(k string) string { return strings.TrimSpace(c.FormValue(k)) }
	return views.ComposerForm{
		Objective: v("objective"), Mode: v("mode"), Model: v("model"), Executor: v("executor"),
		MaxIterations: v("max_iterations"), MaxMinutes: v("max_minutes"), MaxCostUSD: v("max_cost_usd"), MaxTokens: v("max_tokens"),
		OnForecast: v("on_forecast"), WriteMode: v("write_mode"), Token: v("token"), CheckCommands: c.FormValue("check_commands"),
		Pattern: v("pattern"), PatternTarget: v("pattern_target"), TasksAllDone: c.FormValue("tasks_all_done") != "",
		DocExists: v("doc_exists"), NoProgress: v("no_progress"), RepeatedError: v("repeated_error"),
		AgentArgv: v("agent_argv"), AgentWorkdir: v("agent_workdir"), ParentRunID: v("parent_run_id"), Script: v("script"),
		AgentPreset: v("agent_preset"), AgentFormat: v("agent_output_format"), AgentResume: c.FormValue("agent_resume") != "",
		Tags: v("tags"), MCPServers: formValues(c, "mcp_servers"),
	}
}

// formValues returns every value of the form field name (checkboxes).
func formValues(c *fiber.Ctx, name string) []string {
	var out []string
	for _, v := range c.Request().PostArgs().PeekMulti(name) {
		if s := strings.TrimSpace(string(v)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// formErrors collects field errors while a form is parsed.
type formErrors map[string]string

func (fe formErrors) int(name, val string) int64 {
	if val == "" {
		return 0
	}
	n, err := strconv.ParseInt(val, 10, 64)
	switch {
	case err != nil || n < 0:
		fe[name] = "Enter a whole number, or leave it empty."
		return 0
	case n == 0:
		// 0 would silently mean "not set"; say so instead.
		fe[name] = "0 is not a limit: enter 1 or more, or leave it empty (no limit, or the stated default)."
		return 0
	}
	return n
}

func (fe formErrors) money(name, val string) float64 {
	if val == "" {
		return 0
	}
	f, err := strconv.ParseFloat(strings.TrimPrefix(val, "$"), 64)
	switch {
	case err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0):
		fe[name] = "Enter an amount in US dollars, such as 2.50, or leave it empty."
		return 0
	case f == 0:
		// Any amount above zero is a limit, as in the API: a run cloned
		// from one with a budget below a cent keeps it.
		fe[name] = "$0 is not a limit: enter an amount above 0, or leave it empty for no limit."
		return 0
	}
	return f
}

// budgetsFromForm reads the budget fields shared by the composer and the
// continue form.
func budgetsFromForm(fe formErrors, iterations, minutes, cost, tokens string) spec.Budgets {
	mins := fe.int("max_minutes", minutes)
	if mins > math.MaxInt64/60_000 {
		// Multiplied out it would wrap around, possibly to a small budget
		// that passes validation; the engine's limit is far below this.
		fe["max_minutes"] = "That is far more minutes than a run may take; enter a smaller number, or leave it empty."
		mins = 0
	}
	return spec.Budgets{
		MaxIterations:  int(fe.int("max_iterations", iterations)),
		MaxRunningMS:   mins * 60_000,
		MaxCostUSD:     fe.money("max_cost_usd", cost),
		MaxTotalTokens: fe.int("max_tokens", tokens),
	}
}

// configFromForm builds a run configuration from the composer's form.
func (s *Server) configFromForm(u *spec.User, f views.ComposerForm) (spec.Config, formErrors) {
	fe := formErrors{}
	cfg := spec.Config{
		Objective: f.Objective, Mode: f.Mode, Model: f.Model, Executor: spec.ExecutorLLM,
		Budgets:     budgetsFromForm(fe, f.MaxIterations, f.MaxMinutes, f.MaxCostUSD, f.MaxTokens),
		Permissions: spec.Permissions{WriteMode: f.WriteMode},
		Completion:  spec.Completion{Token: f.Token},
		Breakers: spec.Breakers{
			NoProgress:    int(fe.int("no_progress", f.NoProgress)),
			RepeatedError: int(fe.int("repeated_error", f.RepeatedError)),
		},
		ParentRunID: f.ParentRunID,
		Tags:        splitTags(f.Tags),
	}
	cfg.Budgets.OnForecast = f.OnForecast // "" is the mode's default; the engine checks the rest
	switch {
	case f.Script != "" && s.opts.ScriptRunsEnabled:
		if !json.Valid([]byte(f.Script)) {
			fe["script"] = "The test script must be JSON."
		}
		cfg.Executor, cfg.Script = spec.ExecutorScript, json.RawMessage(f.Script)
	case f.Executor == spec.ExecutorCommand:
		// Asked for by name: the engine refuses it (not enabled, not an
		// admin) on field executor rather than quietly running the LLM.
		cfg.Executor = spec.ExecutorCommand
		argv, err := shellSplit(f.AgentArgv)
		if err != nil {
			fe["agent_argv"] = err.Error()
		}
		cfg.Agent = &spec.Agent{Argv: argv, Workdir: f.AgentWorkdir, Preset: f.AgentPreset, OutputFormat: f.AgentFormat, Resume: f.AgentResume}
	}
	if cfg.Executor == spec.ExecutorLLM {
		cfg.MCPServers = f.MCPServers // a command run's agent brings its own
	}
	if f.Executor != "" && f.Executor != spec.ExecutorLLM && f.Executor != spec.ExecutorCommand && cfg.Executor == spec.ExecutorLLM {
		cfg.Executor = f.Executor // refused by the engine by name
	}
	for i, line := range strings.Split(f.CheckCommands, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		argv, err := shellSplit(line)
		if err != nil {
			fe["check_commands"] = "Line " + strconv.Itoa(i+1) + ": " + err.Error()
			continue
		}
		cfg.Completion.Checks = append(cfg.Completion.Checks, spec.CheckSpec{Type: spec.CheckCommand, Name: strings.Join(argv, " "), Argv: argv})
	}
	if f.Pattern != "" {
		target := f.PatternTarget
		if target == "" {
			target = "output"
		}
		cfg.Completion.Checks = append(cfg.Completion.Checks, spec.CheckSpec{Type: spec.CheckContentPattern, Name: "pattern " + f.Pattern, Pattern: f.Pattern, Target: target})
	}
	if f.DocExists != "" {
		cfg.Completion.Checks = append(cfg.Completion.Checks, spec.CheckSpec{Type: spec.CheckDocumentExists, Name: f.DocExists + " exists", Path: f.DocExists})
	}
	if f.TasksAllDone {
		cfg.Completion.Checks = append(cfg.Completion.Checks, spec.CheckSpec{Type: spec.CheckTasksAllDone, Name: "all tasks done"})
	}
	return cfg, fe
}

// formFields maps the engine's field names to the composer's inputs.
var formFields = map[string]string{
	"objective": "objective", "mode": "mode", "model": "model", "executor": "executor",
	"permissions.write_mode": "write_mode", "budgets.max_iterations": "max_iterations",
	"budgets.max_running_ms": "max_minutes", "budgets.max_cost_usd": "max_cost_usd",
	"budgets.max_total_tokens": "max_tokens", "budgets.on_forecast": "on_forecast", "breakers.no_progress": "no_progress",
	"breakers.repeated_error": "repeated_error", "completion.token": "token",
	"agent": "agent_argv", "agent.argv": "agent_argv", "agent.workdir": "agent_workdir",
	"agent.preset": "agent_preset", "agent.output_format": "agent_output_format", "agent.resume": "agent_resume",
	"script": "script", "parent_run_id": "parent_run_id", "tags": "tags",
}

// advancedFields are the inputs inside the composer's Advanced section.
var advancedFields = map[string]bool{
	"max_iterations": true, "max_minutes": true, "max_cost_usd": true, "max_tokens": true, "on_forecast": true, "write_mode": true,
	"checks": true, "check_commands": true, "pattern": true, "doc_exists": true, "token": true,
	"no_progress": true, "repeated_error": true, "script": true,
}

func (s *Server) createRun(c *fiber.Ctx) error {
	u := userOf(c)
	f := composerForm(c)
	cfg, fe := s.configFromForm(u, f)
	var err error
	var run *spec.Run
	if len(fe) == 0 {
		run, err = s.engine.CreateRun(c.UserContext(), u, cfg)
		if err == nil {
			return c.Redirect("/runs/"+run.ID, fiber.StatusSeeOther)
		}
	}
	var d views.ComposerData
	if rerr := s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		d = s.composerData(c, r, f)
		if f.ParentRunID != "" {
			if p, err := r.FindRun(c.UserContext(), u.ID, f.ParentRunID); err == nil {
				d.Parent = p
			}
		}
		return nil
	}); rerr != nil {
		return s.pageError(c, rerr)
	}
	status := fiber.StatusBadRequest
	if err != nil {
		if code := spec.ErrorCode(err); code == spec.EINTERNAL {
			return s.pageError(c, err)
		}
		status = HTTPStatus(err)
		field := spec.ErrorField(err)
		name, ok := formFields[field]
		if strings.HasPrefix(field, "completion.checks") {
			name, ok = "checks", true
		}
		if strings.HasPrefix(field, "tags") {
			name, ok = "tags", true
		}
		if strings.HasPrefix(field, "mcp_servers") {
			name, ok = "mcp_servers", true
		}
		if name == "executor" && !d.CommandRuns {
			ok = false
		}
		if ok {
			fe[name] = spec.ErrorMessage(err)
		} else {
			d.Error = spec.ErrorMessage(err)
		}
	}
	if msg, ok := fe["parent_run_id"]; ok && d.Parent == nil {
		d.Error = msg // the field is only shown with its parent
		delete(fe, "parent_run_id")
	}
	d.Errors = fe
	if d.Error == "" {
		d.Error = "Please correct the highlighted fields."
	}
	for name := range fe {
		d.AdvancedOpen = d.AdvancedOpen || advancedFields[name]
	}
	return s.render(c, status, views.Composer(d))
}

// shellSplit splits a command line into words as a POSIX shell would:
// quotes, backslash escapes and # comments, with no expansion of any kind.
func shellSplit(s string) ([]string, error) {
	words, err := shlex.Split(s)
	switch {
	case err == nil:
		return words, nil
	case strings.Contains(err.Error(), "closing quote"):
		return nil, errors.New("unterminated quote")
	case strings.Contains(err.Error(), "escape"):
		return nil, errors.New("trailing backslash")
	}
	return nil, fmt.Errorf("the command line cannot be split: %v", err)
}

// splitTags reads the composer's comma-separated tags; the engine validates
// them.
func splitTags(s string) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}
