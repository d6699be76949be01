package handlers

import (
	"homework/engine/agentcmd"
	"homework/views"
)

// agentPresetViews lists the agent CLI presets for the composer, each with
// its argv as the shell-style text the argv field takes.
func agentPresetViews() []views.AgentPreset {
	var out []views.AgentPreset
	for _, p := range agentcmd.Presets() {
		out = append(out, views.AgentPreset{Name: p.Name, Label: p.Label, Argv: shellJoin(p.Argv), OutputFormat: p.OutputFormat})
	}
	return out
}
