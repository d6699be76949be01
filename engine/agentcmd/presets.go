package agentcmd

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"homework/engine/spec"
)

// Preset names for agent.preset.
const (
	PresetClaude = "claude"
	PresetCodex  = "codex"
	PresetGemini = "gemini"
	PresetAider  = "aider"
	PresetCustom = "custom"
)

// Preset is the headless invocation of a known agent CLI. Every preset
// reads the prompt on stdin.
type Preset struct {
	Name         string   `json:"name"`
	Label        string   `json:"label"`
	Argv         []string `json:"argv"`
	OutputFormat string   `json:"output_format"`
	// Resumable says whether agent.resume works with it.
	Resumable bool `json:"resumable"`
	// DefaultModel is the model the CLI runs when neither the run's model
	// nor -m/--model in the argv names one: the CLI's documented default
	// on the date of the price table. A run whose CLI's configuration
	// picks another model should name it, so its price is the right one.
	DefaultModel string `json:"default_model,omitempty"`
}

// Presets returns the presets in the order the composer offers them.
// custom has no argv: the person writes it.
func Presets() []Preset {
	return []Preset{
		// Claude Code's default depends on the account; it reports its own
		// cost, which is what the budget counts.
		{Name: PresetClaude, Label: "Claude Code (claude -p, stream-json)",
			Argv:         []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"},
			OutputFormat: FormatClaudeStreamJSON, Resumable: true, DefaultModel: "claude-sonnet-4-5-20250929"},
		{Name: PresetCodex, Label: "Codex (codex exec --json)",
			Argv:         []string{"codex", "exec", "--json", "--full-auto", "--skip-git-repo-check", "-"},
			OutputFormat: FormatCodexJSON, Resumable: true, DefaultModel: "gpt-5-codex"},
		// Gemini CLI reads the prompt on stdin when it is not a terminal.
		{Name: PresetGemini, Label: "Gemini CLI (gemini --output-format json)",
			Argv:         []string{"gemini", "--output-format", "json", "--yolo"},
			OutputFormat: FormatGeminiJSON, DefaultModel: "gemini-2.5-pro"},
		{Name: PresetAider, Label: "Aider (text)",
			Argv:         []string{"aider", "--yes-always", "--no-pretty", "--no-stream", "--message-file", "/dev/stdin"},
			OutputFormat: FormatText},
		{Name: PresetCustom, Label: "Custom command", OutputFormat: FormatText},
	}
}

// FindPreset returns the named preset.
func FindPreset(name string) (Preset, bool) {
	for _, p := range Presets() {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

// applyPreset fills an empty argv and output format from agent.preset; an
// argv the person wrote is kept as written.
func applyPreset(a *spec.Agent) error {
	if a.Preset == "" {
		return nil
	}
	p, ok := FindPreset(a.Preset)
	if !ok {
		return spec.FieldError("agent.preset", "agent.preset must be one of claude, codex, gemini, aider or custom, not %q.", oneLine(a.Preset, 40))
	}
	if len(a.Argv) == 0 && len(p.Argv) > 0 {
		a.Argv = slices.Clone(p.Argv)
	}
	if a.OutputFormat == "" {
		a.OutputFormat = p.OutputFormat
	}
	return nil
}

// validateFormat checks agent.output_format and agent.resume.
func validateFormat(a *spec.Agent) error {
	if !ValidOutputFormat(a.OutputFormat) {
		return spec.FieldError("agent.output_format", "agent.output_format must be one of %s, not %q.", strings.Join(OutputFormats(), ", "), oneLine(a.OutputFormat, 40))
	}
	switch a.OutputFormat {
	case FormatClaudeJSON, FormatClaudeStreamJSON, FormatCodexJSON:
	default:
		if a.Resume {
			return spec.FieldError("agent.resume", "agent.resume needs an output format that reports the agent's session (claude-json, claude-stream-json or codex-json).")
		}
	}
	return nil
}

// ResolveModel returns the model a command run's agent is priced as: the
// run's model, else the one -m/--model (or codex's -c model=…) names in
// agent.argv, else the default of its preset (agent.preset, or the preset
// of the CLI agent.argv runs). It returns "" when none is known.
func ResolveModel(cfg *spec.Config) string {
	if cfg == nil {
		return ""
	}
	if m := strings.TrimSpace(cfg.Model); m != "" {
		return m
	}
	a := cfg.Agent
	if a == nil {
		return ""
	}
	if m := ArgvModel(a.Argv); m != "" {
		return m
	}
	if p, ok := presetOf(a); ok {
		return p.DefaultModel
	}
	return ""
}

// ArgvModel returns the model an agent command line names with -m X,
// --model X, --model=X or -c model=X, "" when none. The last one wins, as
// with the CLIs' own flag parsers.
func ArgvModel(argv []string) string {
	model := ""
	for i := 1; i < len(argv); i++ {
		arg := argv[i]
		switch {
		case arg == "--":
			return model
		case (arg == "-m" || arg == "--model") && i+1 < len(argv):
			model = argv[i+1]
			i++
		case strings.HasPrefix(arg, "--model="):
			model = strings.TrimPrefix(arg, "--model=")
		case (arg == "-c" || arg == "--config") && i+1 < len(argv):
			if v, ok := strings.CutPrefix(argv[i+1], "model="); ok {
				model = strings.Trim(v, `"'`)
			}
			i++
		}
	}
	return strings.TrimSpace(model)
}

// presetOf returns the preset a command names: agent.preset, else the
// preset whose program agent.argv runs (claude, codex, gemini).
func presetOf(a *spec.Agent) (Preset, bool) {
	if a.Preset != "" {
		return FindPreset(a.Preset)
	}
	if len(a.Argv) == 0 {
		return Preset{}, false
	}
	prog := filepath.Base(a.Argv[0])
	for _, p := range Presets() {
		if len(p.Argv) > 0 && p.Argv[0] == prog {
			return p, true
		}
	}
	return Preset{}, false
}

// checkBudgetsBind refuses a token or cost budget that the run's agent
// could not be held to: a format that reports no usage, or a cost budget
// whose model has no price when the CLI reports no cost of its own.
func (e *Executor) checkBudgetsBind(cfg *spec.Config) error {
	a, b := cfg.Agent, cfg.Budgets
	format := orStr(a.OutputFormat, FormatText)
	if !ReportsUsage(format) {
		field, what := "budgets.max_cost_usd", "cost"
		if b.MaxCostUSD <= 0 {
			field, what = "budgets.max_total_tokens", "token"
		}
		if b.MaxCostUSD <= 0 && b.MaxTotalTokens <= 0 {
			return nil
		}
		return spec.FieldError(field, "A %s budget needs the agent's usage, and agent.output_format %s reports none: "+
			"choose claude-json, claude-stream-json, codex-json or gemini-json (the preset of a known CLI sets it), or leave out the %s budget.", what, format, what)
	}
	if b.MaxCostUSD <= 0 || ReportsCost(format) {
		return nil
	}
	model := ResolveModel(cfg)
	if model == "" {
		return spec.FieldError("budgets.max_cost_usd", "The agent's model is unknown, so its cost budget cannot be kept (%s reports tokens, not cost): "+
			"set \"model\" or -m in agent.argv, or leave out budgets.max_cost_usd.", format)
	}
	if e.opts.Prices != nil {
		if _, _, ok := e.opts.Prices.Lookup(model); ok {
			return nil
		}
	}
	return spec.FieldError("budgets.max_cost_usd", "%s", fmt.Sprintf("The model %q has no known price, so a cost budget cannot be kept (%s reports tokens, not cost). "+
		"Add it to the price file (--prices FILE with {%q: {\"input\": USD per 1M tokens, \"output\": USD per 1M tokens, \"cache_read\": USD per 1M tokens}}), "+
		"name a priced model, or leave out budgets.max_cost_usd.", model, format, model))
}

// PricedAs says how a command run of cfg will be priced, before it is
// created: the model (and how it was found: "the run's model", "-m in the
// command", "claude's default"), whether the CLI reports its own cost, and
// whether its output format reports no usage at all. The preset fills an
// empty argv and output format first, as at creation.
func PricedAs(cfg spec.Config) (model, how string, reportsCost, noUsage bool) {
	a := spec.Agent{}
	if cfg.Agent != nil {
		a = *cfg.Agent
	}
	if p, ok := FindPreset(a.Preset); ok {
		if len(a.Argv) == 0 {
			a.Argv = p.Argv
		}
		if a.OutputFormat == "" {
			a.OutputFormat = p.OutputFormat
		}
	}
	format := orStr(a.OutputFormat, FormatText)
	reportsCost, noUsage = ReportsCost(format), !ReportsUsage(format)
	cfg.Agent = &a
	switch model = ResolveModel(&cfg); {
	case model == "":
	case strings.TrimSpace(cfg.Model) != "":
		how = "the run's model"
	case ArgvModel(a.Argv) != "":
		how = "named in the command"
	default:
		p, _ := presetOf(&a)
		how = p.Name + "'s default"
	}
	return model, how, reportsCost, noUsage
}
