package agentcmd

import (
	"slices"

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
}

// Presets returns the presets in the order the composer offers them.
// custom has no argv: the person writes it.
func Presets() []Preset {
	return []Preset{
		{Name: PresetClaude, Label: "Claude Code (claude -p, stream-json)",
			Argv:         []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"},
			OutputFormat: FormatClaudeStreamJSON, Resumable: true},
		{Name: PresetCodex, Label: "Codex (codex exec --json)",
			Argv:         []string{"codex", "exec", "--json", "--full-auto", "--skip-git-repo-check", "-"},
			OutputFormat: FormatCodexJSON, Resumable: true},
		{Name: PresetGemini, Label: "Gemini CLI (text)", Argv: []string{"gemini", "--yolo"}, OutputFormat: FormatText},
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
		return spec.FieldError("agent.output_format", "agent.output_format must be text, claude-json, claude-stream-json or codex-json, not %q.", oneLine(a.OutputFormat, 40))
	}
	if a.Resume && (a.OutputFormat == "" || a.OutputFormat == FormatText) {
		return spec.FieldError("agent.resume", "agent.resume needs an output format that reports the agent's session (claude-json, claude-stream-json or codex-json).")
	}
	return nil
}
