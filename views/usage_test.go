package views

import (
	"testing"

	"homework/engine/spec"
)

func TestUsageFormatting(t *testing.T) {
	m := spec.Metrics{PromptTokens: 52003, CachedTokens: 40000, CacheWriteTokens: 12000, CompletionTokens: 3000, ReasoningTokens: 1800}
	s := SplitTokens(m)
	if s.Input+s.Cached+s.Output+s.Reasoning != m.PromptTokens+m.CompletionTokens {
		t.Errorf("split %+v does not add up to %d tokens", s, m.PromptTokens+m.CompletionTokens)
	}
	if got, want := s.String(), "12.0k input (12.0k cache write) · 40.0k cached · 1200 output · 1800 reasoning"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := SplitTokens(spec.Metrics{PromptTokens: 10, CompletionTokens: 5}).String(); got != "10 input · 0 cached · 5 output" {
		t.Errorf("plain split %q", got)
	}
	for _, tc := range []struct {
		cost, reported float64
		unpriced       bool
		want           string
	}{
		{0.5, 0.5, false, "reported by the CLI"},
		{0.5, 0, false, "price table"},
		{0.5, 0.2, false, "$0.200 reported by the CLI, $0.300 from the price table"},
		{0, 0, true, "unpriced"},
		{0.5, 0, true, "price table; some calls unpriced"},
	} {
		if got := CostSource(tc.cost, tc.reported, tc.unpriced); got != tc.want {
			t.Errorf("CostSource(%v, %v, %v) = %q, want %q", tc.cost, tc.reported, tc.unpriced, got, tc.want)
		}
	}
	for v, want := range map[float64]string{0.125: "$0.125", 1.25: "$1.25", 10: "$10.00", 2.5: "$2.50", 0.0375: "$0.0375"} {
		if got := Rate(v); got != want {
			t.Errorf("Rate(%v) = %q, want %q", v, got, want)
		}
	}
}
