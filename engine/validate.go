package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"homework/engine/checks"
	"homework/engine/spec"
)

// validateConfig checks a run's configuration and fills in defaults. It
// returns a field-level *spec.Error for the first problem.
func (e *Engine) validateConfig(ctx context.Context, user *spec.User, cfg *spec.Config) error {
	if err := e.validateText(cfg); err != nil {
		return err
	}
	if cfg.Mode == "" {
		cfg.Mode = spec.ModeAuto
	}
	if cfg.Mode != spec.ModeAuto && cfg.Mode != spec.ModeInteractive {
		return spec.FieldError("mode", "Mode must be %q or %q.", spec.ModeAuto, spec.ModeInteractive)
	}
	x, err := e.validateExecutor(cfg)
	if err != nil {
		return err
	}
	if len(cfg.MCPServers) > 0 && cfg.Executor != spec.ExecutorLLM {
		return spec.FieldError("mcp_servers", "mcp_servers is only used by LLM runs (executor %q).", spec.ExecutorLLM)
	}
	if cfg.Permissions.WriteMode == "" {
		cfg.Permissions.WriteMode = spec.WriteAutopilot
	}
	switch cfg.Permissions.WriteMode {
	case spec.WriteAutopilot, spec.WriteApprovePlan, spec.WriteReadOnly:
	default:
		return spec.FieldError("permissions.write_mode", "Write mode must be autopilot, approve_plan or read_only.")
	}
	if len(cfg.Model) > 200 {
		return spec.FieldError("model", "Model name is too long.")
	}
	if err := e.validateBudgets(&cfg.Budgets); err != nil {
		return err
	}
	if err := validateBreakers(cfg.Breakers); err != nil {
		return err
	}
	tags, err := NormalizeTags("tags", cfg.Tags)
	if err != nil {
		return err
	}
	cfg.Tags = tags
	if len(cfg.Completion.Token) > 200 {
		return spec.FieldError("completion.token", "Completion token is too long.")
	}
	// The executor speaks first: "command runs are not enabled" or "only
	// admins" say more than a refused check would.
	if v, ok := x.(ConfigValidator); ok {
		if err := v.ValidateConfig(ctx, user, cfg); err != nil {
			return err
		}
	}
	if err := e.validateChecks(user, cfg); err != nil {
		return err
	}
	if cfg.Agent != nil && cfg.Executor == spec.ExecutorLLM {
		return spec.FieldError("agent", "agent is only used by command runs.")
	}
	return nil
}

// validateText checks the objective (trimmed here), the model and the
// completion token for emptiness, length and control characters.
func (e *Engine) validateText(cfg *spec.Config) error {
	cfg.Objective = strings.TrimSpace(cfg.Objective)
	switch {
	case cfg.Objective == "":
		return spec.FieldError("objective", "Objective is required.")
	case len(cfg.Objective) > e.opts.MaxObjectiveBytes:
		return spec.FieldError("objective", "Objective is too long (%d bytes; the limit is %d).", len(cfg.Objective), e.opts.MaxObjectiveBytes)
	case checkText("objective", "Objective", cfg.Objective) != nil:
		return checkText("objective", "Objective", cfg.Objective)
	case strings.ContainsFunc(cfg.Model, isControl) || strings.ContainsFunc(cfg.Completion.Token, isControl):
		return spec.FieldError("model", "Model and completion token must not contain control characters.")
	}
	return nil
}

// validateExecutor fills in the default executor and returns it, or
// refuses an executor this server does not have (EUNAVAILABLE for a known
// one that is not enabled) and a script on a run that is not a script run.
func (e *Engine) validateExecutor(cfg *spec.Config) (Executor, error) {
	if cfg.Executor == "" {
		cfg.Executor = spec.ExecutorLLM
	}
	x, ok := e.executor(cfg.Executor)
	if err := e.checkScriptField(cfg); err != nil {
		return nil, err
	}
	if !ok {
		if cfg.Executor == spec.ExecutorLLM || cfg.Executor == spec.ExecutorCommand {
			return nil, &spec.Error{Code: spec.EUNAVAILABLE, Field: "executor", Message: fmt.Sprintf("The %s executor is not available on this server.", cfg.Executor)}
		}
		return nil, spec.FieldError("executor", "Executor must be %q or %q.", spec.ExecutorLLM, spec.ExecutorCommand)
	}
	return x, nil
}

// validateBreakers checks the circuit breakers' thresholds and cycles.
func validateBreakers(b spec.Breakers) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"breakers.no_progress", b.NoProgress}, {"breakers.repeated_error", b.RepeatedError}, {"breakers.stall_repeats", b.StallRepeats}} {
		if f.v < 0 || f.v > 100 {
			return spec.FieldError(f.name, "Must be between 1 and 100.")
		}
	}
	return validateCycles(b)
}

// validateChecks checks the completion checks. Command checks run programs
// on the server: only where command runs may, in the run's work directory.
func (e *Engine) validateChecks(user *spec.User, cfg *spec.Config) error {
	hasWorkdir := cfg.Agent != nil && cfg.Agent.Workdir != ""
	commandAllowed := cfg.Executor == spec.ExecutorScript ||
		cfg.Executor == spec.ExecutorCommand && e.opts.CommandRunsAllowed && user.IsAdmin
	if err := checks.Validate(cfg.Completion.Checks, commandAllowed); err != nil {
		return err
	}
	for i, c := range cfg.Completion.Checks {
		if c.Type == spec.CheckCommand && !hasWorkdir {
			return spec.FieldError(fmt.Sprintf("completion.checks[%d]", i), "Command checks run in the agent's work directory: set agent.workdir.")
		}
	}
	return nil
}

// checkScriptField refuses a script on a run that is not a script run.
func (e *Engine) checkScriptField(cfg *spec.Config) error {
	if len(cfg.Script) == 0 || string(cfg.Script) == "null" || cfg.Executor == spec.ExecutorScript {
		return nil
	}
	if _, enabled := e.executor(spec.ExecutorScript); !enabled {
		return spec.FieldError("script", "This server does not run scripts (the script executor is not enabled); leave out script.")
	}
	return spec.FieldError("script", "script is only used by script runs (executor %q).", spec.ExecutorScript)
}

func (e *Engine) validateBudgets(b *spec.Budgets) error {
	o := e.opts
	switch {
	case b.MaxIterations < 0 || b.MaxIterations > o.MaxIterations:
		return spec.FieldError("budgets.max_iterations", "Must be between 1 and %d.", o.MaxIterations)
	case b.MaxRunningMS < 0 || b.MaxRunningMS > o.MaxRunningTime.Milliseconds():
		return spec.FieldError("budgets.max_running_ms", "Must be between 1 and %d.", o.MaxRunningTime.Milliseconds())
	case b.MaxTotalTokens < 0 || b.MaxTotalTokens > o.MaxTokens:
		return spec.FieldError("budgets.max_total_tokens", "Must be between 1 and %d.", o.MaxTokens)
	case b.MaxCostUSD < 0 || b.MaxCostUSD > o.MaxCostUSD || math.IsNaN(b.MaxCostUSD) || math.IsInf(b.MaxCostUSD, 0):
		return spec.FieldError("budgets.max_cost_usd", "Must be between 0.01 and %g.", o.MaxCostUSD)
	case b.MaxToolCalls < 0 || b.MaxToolCalls > o.MaxToolCalls:
		return spec.FieldError("budgets.max_tool_calls", "Must be between 1 and %d.", o.MaxToolCalls)
	case b.IterationTimeoutMS < 0 || b.IterationTimeoutMS > o.MaxIterationTime.Milliseconds():
		return spec.FieldError("budgets.iteration_timeout_ms", "Must be between 1 and %d.", o.MaxIterationTime.Milliseconds())
	case b.IterationToolCalls < 0 || b.IterationToolCalls > 10000:
		return spec.FieldError("budgets.iteration_tool_calls", "Must be between 1 and 10000.")
	case b.OnForecast != "" && !slices.Contains(spec.OnForecasts, b.OnForecast):
		return spec.FieldError("budgets.on_forecast", "Must be one of %s.", strings.Join(spec.OnForecasts, ", "))
	}
	if b.MaxRunningMS == 0 {
		b.MaxRunningMS = o.DefaultRunningTime.Milliseconds()
	}
	if b.IterationTimeoutMS == 0 {
		b.IterationTimeoutMS = o.DefaultIterationTime.Milliseconds()
	}
	if b.IterationToolCalls == 0 {
		b.IterationToolCalls = o.DefaultIterationTools
	}
	return nil
}

// raiseBudgets applies Continue's budgets over old: each field given
// replaces the old one (Continue then refuses a budget that is still
// exhausted).
func (e *Engine) raiseBudgets(old spec.Budgets, raise *spec.Budgets) (spec.Budgets, error) {
	if raise == nil {
		return old, nil
	}
	r := *raise
	if err := e.validateBudgets(&r); err != nil {
		return old, err
	}
	out := old
	if raise.MaxIterations > 0 {
		out.MaxIterations = raise.MaxIterations
	}
	if raise.MaxRunningMS > 0 {
		out.MaxRunningMS = raise.MaxRunningMS
	}
	if raise.MaxTotalTokens > 0 {
		out.MaxTotalTokens = raise.MaxTotalTokens
	}
	if raise.MaxCostUSD > 0 {
		out.MaxCostUSD = raise.MaxCostUSD
	}
	if raise.MaxToolCalls > 0 {
		out.MaxToolCalls = raise.MaxToolCalls
	}
	if raise.IterationTimeoutMS > 0 {
		out.IterationTimeoutMS = raise.IterationTimeoutMS
	}
	if raise.IterationToolCalls > 0 {
		out.IterationToolCalls = raise.IterationToolCalls
	}
	if raise.OnForecast != "" {
		out.OnForecast = raise.OnForecast
	}
	return out, nil
}

// isControl reports control characters other than tab, newline and carriage
// return (C0, DEL and C1), and the bidirectional embedding, override and
// isolate controls (U+202A–U+202E, U+2066–U+2069) that make text read
// differently from what it says: none has a place in an objective, a
// message, an answer or a name.
func isControl(r rune) bool {
	switch {
	case r < 0x20:
		return r != '\t' && r != '\n' && r != '\r'
	case r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// checkText refuses text that is not valid UTF-8 or holds control
// characters, on field.
func checkText(field, what, text string) error {
	if !utf8.ValidString(text) {
		return spec.FieldError(field, "%s must be valid UTF-8 text.", what)
	}
	if strings.ContainsFunc(text, isControl) {
		return spec.FieldError(field, "%s must not contain control characters or bidirectional overrides.", what)
	}
	return nil
}
