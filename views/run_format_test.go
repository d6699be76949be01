package views

import (
	"strings"
	"testing"

	"homework/engine/spec"
)

func TestCostText(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  spec.Run
		want string
	}{
		{"a command run without usage is not measured", spec.Run{Executor: spec.ExecutorCommand}, "not measured"},
		{"a command run that reported usage shows it", spec.Run{Executor: spec.ExecutorCommand, Metrics: spec.Metrics{LLMCalls: 1, CostTotalUSD: 0.5}}, "$0.500"},
		{"an LLM run with no spend yet is $0.00", spec.Run{Executor: spec.ExecutorLLM}, "$0.00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CostText(RunView{Run: &tc.run}); got != tc.want {
				t.Fatalf("CostText = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSnippetKeepsTheMatchAndWholeRunes(t *testing.T) {
	text := "ééééé lorem ipsum dolor sit amet, the needle is here, consectetur adipiscing elit"
	got := snippet(text, "NEEDLE", 30)
	if !strings.Contains(got, "needle") {
		t.Fatalf("snippet %q lacks the match", got)
	}
	for _, r := range got {
		if r == '\uFFFD' {
			t.Fatalf("snippet %q cut a rune", got)
		}
	}
}
