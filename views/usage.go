package views

import (
	"strconv"
	"strings"

	"homework/engine/spec"
)

// TokenSplit is a count of tokens split as providers bill them: Input
// (prompt tokens not read from the cache, CacheWrite of them written to
// it), Cached (read from the cache), Output (not reasoning) and Reasoning.
// Input, Cached, Output and Reasoning add up to the total.
type TokenSplit struct {
	Input, Cached, CacheWrite, Output, Reasoning int64
}

// SplitTokens splits m's tokens (the cached part comes out of the prompt
// tokens, the reasoning part out of the completion tokens).
func SplitTokens(m spec.Metrics) TokenSplit {
	return TokenSplit{Input: max(0, m.PromptTokens-m.CachedTokens), Cached: m.CachedTokens, CacheWrite: m.CacheWriteTokens,
		Output: max(0, m.CompletionTokens-m.ReasoningTokens), Reasoning: m.ReasoningTokens}
}

// SplitModelTokens is SplitTokens for one model's usage.
func SplitModelTokens(u spec.ModelUsage) TokenSplit {
	return SplitTokens(spec.Metrics{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
		CachedTokens: u.CachedTokens, CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens})
}

// String is "12.3k input (8.0k cache write) · 40.0k cached · 1.5k output ·
// 800 reasoning", leaving out the cache writes and reasoning when there are
// none.
func (s TokenSplit) String() string {
	in := Count(s.Input) + " input"
	if s.CacheWrite > 0 {
		in += " (" + Count(s.CacheWrite) + " cache write)"
	}
	parts := []string{in, Count(s.Cached) + " cached", Count(s.Output) + " output"}
	if s.Reasoning > 0 {
		parts = append(parts, Count(s.Reasoning)+" reasoning")
	}
	return strings.Join(parts, " · ")
}

// CostSource says where a cost comes from: the agent CLI's own report, the
// price table, both (in part), or nowhere (unpriced).
func CostSource(cost, reported float64, unpriced bool) string {
	const eps = 1e-12
	switch {
	case cost == 0 && unpriced:
		return "unpriced"
	case reported > eps && cost-reported <= eps:
		return "reported by the CLI"
	case reported > eps:
		return Dollars(reported) + " reported by the CLI, " + Dollars(cost-reported) + " from the price table"
	case unpriced:
		return "price table; some calls unpriced"
	}
	return "price table"
}

// MetricsCostSource is CostSource for an iteration's or a run's metrics.
func MetricsCostSource(m spec.Metrics) string {
	return CostSource(m.CostTotalUSD, m.CostReportedUSD, m.UnpricedCalls > 0)
}

// PricePreview is what the composer says about the price a run will be
// charged at: the model, its rates per million tokens, and whether a cost
// budget can bind.
type PricePreview struct {
	// Model is the model the run is priced as; "" when none is known.
	Model string
	// How says how the model was chosen ("the run's model", "-m in the
	// command", "codex's default").
	How string
	// Priced says the price table has the model; Rates are its rates.
	Priced                               bool
	Input, Output, CacheRead, CacheWrite float64
	// TierTokens and the tier's rates, when the model has a long-context
	// tier.
	TierTokens            int64
	TierInput, TierOutput float64
	// ReportsCost says the CLI reports its own cost, which wins over the
	// table; NoUsage says the output format reports no usage at all.
	ReportsCost, NoUsage bool
	// Source is the price table's source and date.
	Source string
}

// RatesText is the model's rates per million tokens, its long-context tier
// and, when the CLI reports its own cost, that it wins.
func (p PricePreview) RatesText() string {
	s := Rate(p.Input) + " input · " + Rate(p.CacheRead) + " cached · " + Rate(p.Output) + " output per million tokens"
	if p.CacheWrite != p.Input {
		s += " · " + Rate(p.CacheWrite) + " cache write"
	}
	if p.TierTokens > 0 {
		s += "; above " + Count(p.TierTokens) + " prompt tokens " + Rate(p.TierInput) + " input · " + Rate(p.TierOutput) + " output"
	}
	if p.ReportsCost {
		s += ". The CLI's own cost report wins when it gives one"
	}
	return s + "."
}

// Rate formats a price per million tokens exactly, with at least cents:
// $0.125, $1.25, $10.00.
func Rate(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	switch i := strings.IndexByte(s, '.'); {
	case i < 0:
		s += ".00"
	case len(s)-i == 2:
		s += "0"
	}
	return "$" + s
}
