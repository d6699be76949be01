package views

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"homework/engine/spec"
)

// CostText is the run's cost, or "not measured" for a command run that
// reported no usage (a command agent's spend is not seen, never "$0.00").
// Every place of the run page that tells the run's cost uses it.
func CostText(v RunView) string {
	if !v.CostMeasured() {
		return "not measured"
	}
	return Dollars(v.Run.Metrics.CostTotalUSD)
}

// CostMeasured reports whether the run's spend is known: not for a command
// run that reported no usage.
func (v RunView) CostMeasured() bool {
	m := v.Run.Metrics
	return m.CostTotalUSD != 0 || m.LLMCalls != 0 || v.Run.Executor != spec.ExecutorCommand
}

// Dollars formats an amount of the run page in US dollars with three
// significant digits below a dollar, like Money below a cent ($0.00321,
// $0.0123, $0.0400, $0.500), and cents from a dollar up ($1.23, $12.35):
// one format for every cost on the page.
func Dollars(v float64) string {
	if v <= 0 || v >= 1 {
		return Money(v)
	}
	// 0.0123 has its first significant digit at the second decimal: four
	// decimals.
	first := math.Floor(math.Log10(v))
	decimals := 2 - int(first)
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if r, _ := strconv.ParseFloat(s, 64); r >= math.Pow(10, first+1) {
		// Rounded up to the next power of ten (0.0099996 to 0.0100):
		// one decimal fewer keeps three digits.
		if r >= 1 {
			return "$1.00"
		}
		s = strconv.FormatFloat(r, 'f', decimals-1, 64)
	}
	return "$" + s
}

// Bytes formats a byte count.
func Bytes(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return plural(int(n), "byte", "bytes")
}

func joinArgs(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// budgetText lists the run's budgets with their limits.
func budgetText(b spec.Budgets) string {
	var parts []string
	if b.MaxIterations > 0 {
		parts = append(parts, plural(b.MaxIterations, "iteration", "iterations"))
	}
	if b.MaxRunningMS > 0 {
		parts = append(parts, Duration(msDuration(b.MaxRunningMS))+" running")
	}
	if b.MaxTotalTokens > 0 {
		parts = append(parts, Count(b.MaxTotalTokens)+" tokens")
	}
	if b.MaxCostUSD > 0 {
		parts = append(parts, Dollars(b.MaxCostUSD))
	}
	if b.MaxToolCalls > 0 {
		parts = append(parts, plural(b.MaxToolCalls, "tool call", "tool calls"))
	}
	if b.IterationTimeoutMS > 0 {
		parts = append(parts, Duration(msDuration(b.IterationTimeoutMS))+" per iteration")
	}
	if b.IterationToolCalls > 0 {
		parts = append(parts, plural(b.IterationToolCalls, "tool call", "tool calls")+" per iteration")
	}
	if len(parts) == 0 {
		return "server defaults"
	}
	return strings.Join(parts, " · ")
}

// checkText describes what a completion check looks at.
func checkText(c spec.CheckSpec) string {
	switch c.Type {
	case spec.CheckCommand:
		return "runs " + joinArgs(c.Argv)
	case "content_pattern":
		return fmt.Sprintf("%s matches /%s/", orText(c.Target, "output"), c.Pattern)
	case "document_exists":
		return c.Path + " exists"
	case "prd_all_pass":
		return "every story of " + orText(c.Path, "prd.json") + " passes"
	case "tasks_all_done":
		return "every task is done"
	}
	return c.Type
}

// breakerText lists the breaker thresholds (defaults named as such).
func breakerText(b spec.Breakers) string {
	n := func(v, def int) string {
		if v > 0 {
			return strconv.Itoa(v)
		}
		return strconv.Itoa(def) + " (default)"
	}
	q := "on (default)"
	if b.QualityRegression != nil {
		q = map[bool]string{true: "on", false: "off"}[*b.QualityRegression]
	}
	return "no progress " + n(b.NoProgress, 3) + " · repeated error " + n(b.RepeatedError, 5) +
		" · stall repeats " + n(b.StallRepeats, 3) + " · quality regression " + q
}

// logWho names the tool, check and role of a transcript line.
func logWho(l *spec.TranscriptLine) string {
	var parts []string
	if l.Name != "" {
		parts = append(parts, l.Name)
	}
	if l.Role != "" {
		parts = append(parts, "("+l.Role+")")
	}
	if l.Attempt > 1 {
		parts = append(parts, "attempt "+strconv.Itoa(l.Attempt))
	}
	if len(parts) == 0 {
		return " "
	}
	return " " + strings.Join(parts, " ") + " "
}

// lineID is the anchor of line k of iteration n's log.
func lineID(n, k int) string { return "i" + strconv.Itoa(n) + "-L" + strconv.Itoa(k) }

// logKey tells apart the sources of log blocks: consecutive blocks of one
// source show one head.
func logKey(l *spec.TranscriptLine) string {
	return l.Kind + ":" + l.Name + ":" + l.Role + ":" + strconv.Itoa(l.Attempt)
}

// snippet returns up to n bytes of text around the first match of q.
func snippet(text, q string, n int) string {
	i := strings.Index(strings.ToLower(text), strings.ToLower(q))
	if i < 0 {
		i = 0
	}
	start := max(0, i-n/3)
	for start > 0 && !utf8.RuneStart(text[start]) {
		start--
	}
	end := min(len(text), start+n)
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end++
	}
	out := strings.Join(strings.Fields(text[start:end]), " ")
	if start > 0 {
		out = "…" + out
	}
	if end < len(text) {
		out += "…"
	}
	return out
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// ReportCost is the report's cost in the page's one format: "not measured"
// like the run's own cost when the run's spend is not known.
func (v RunView) ReportCost() string {
	if v.Report == nil || !v.CostMeasured() {
		return CostText(v)
	}
	return Dollars(v.Report.Metrics.TotalCostUSD)
}
