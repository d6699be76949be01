package handlers

import (
	"strconv"
	"strings"

	"homework/engine/spec"
	"homework/views"
)

// formFromConfig fills the composer from a run's configuration: "Run again"
// and "Ask follow-up" start from the settings of an earlier run. Submitted
// unchanged it yields the same configuration (parent aside).
func formFromConfig(cfg *spec.Config) views.ComposerForm {
	f := views.ComposerForm{
		Objective: cfg.Objective, Mode: cfg.Mode, Model: cfg.Model, Executor: cfg.Executor,
		WriteMode: cfg.Permissions.WriteMode, Token: cfg.Completion.Token, MCPServers: cfg.MCPServers,
	}
	num := func(n int64) string {
		if n <= 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	b := cfg.Budgets
	f.MaxIterations = num(int64(b.MaxIterations))
	if b.MaxRunningMS > 0 {
		// The composer takes whole minutes; round up so a clone never has
		// a smaller budget than its original.
		f.MaxMinutes = num((b.MaxRunningMS + 59_999) / 60_000)
	}
	if b.MaxCostUSD > 0 {
		f.MaxCostUSD = strconv.FormatFloat(b.MaxCostUSD, 'f', -1, 64)
	}
	f.MaxTokens = num(b.MaxTotalTokens)
	f.NoProgress = num(int64(cfg.Breakers.NoProgress))
	f.RepeatedError = num(int64(cfg.Breakers.RepeatedError))
	var commands []string
	for _, c := range cfg.Completion.Checks {
		switch c.Type {
		case spec.CheckCommand:
			commands = append(commands, shellJoin(c.Argv))
		case spec.CheckContentPattern:
			f.Pattern, f.PatternTarget = c.Pattern, c.Target
			if f.PatternTarget == "output" {
				f.PatternTarget = ""
			}
		case spec.CheckDocumentExists:
			f.DocExists = c.Path
		case spec.CheckTasksAllDone:
			f.TasksAllDone = true
		}
	}
	f.CheckCommands = strings.Join(commands, "\n")
	if cfg.Agent != nil {
		f.AgentArgv, f.AgentWorkdir = shellJoin(cfg.Agent.Argv), cfg.Agent.Workdir
	}
	if cfg.Executor == spec.ExecutorScript {
		f.Script = string(cfg.Script)
	}
	return f
}

// shellJoin quotes argv so that the composer's shell-style splitting gives
// it back word for word.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == ',' || r == ':' || r == '=' || r == '+' || r == '@' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
