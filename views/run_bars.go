package views

import (
	"strconv"
	"strings"
	"time"
)

// barScale is what the timeline's duration bars are drawn against: the
// longest of the iterations shown (a running one counts up to now).
type barScale struct {
	Max time.Duration
	Now time.Time
	// Unmeasured is set for a run whose spend is not known (CostText).
	Unmeasured bool
}

// timelineScale returns the scale of the bars of its.
func timelineScale(v RunView) barScale {
	s := barScale{Now: v.Now, Unmeasured: !v.CostMeasured()}
	for _, it := range v.Iterations {
		s.Max = max(s.Max, it.Took(v.Now))
	}
	return s
}

// Took is how long the iteration took, or has taken so far while it runs;
// 0 when it has not started.
func (it IterationView) Took(now time.Time) time.Duration {
	if it.StartedAt.IsZero() {
		return 0
	}
	end := it.EndedAt
	if end.IsZero() {
		end = now
	}
	return max(0, end.Sub(it.StartedAt))
}

// CheckTime is how long the iteration's completion checks ran.
func (it IterationView) CheckTime() time.Duration {
	var ms int64
	for _, c := range it.Checks {
		ms += c.DurationMS
	}
	return time.Duration(ms) * time.Millisecond
}

// ModelTime is how long the iteration waited on model calls.
func (it IterationView) ModelTime() time.Duration {
	return time.Duration(it.Metrics.ModelMS) * time.Millisecond
}

// iterationBar is the geometry of an iteration's bar, in hundredths of the
// timeline's width: its model calls, the rest of its work and, after it,
// its checks.
type iterationBar struct {
	Model, Work, Checks float64
}

// Total is the bar's whole length.
func (b iterationBar) Total() float64 { return b.Model + b.Work + b.Checks }

// bar draws it against s: at least a sliver for any iteration that started,
// so a fast one is still seen.
func (s barScale) bar(it IterationView) iterationBar {
	took := it.Took(s.Now)
	if took <= 0 || s.Max <= 0 {
		return iterationBar{}
	}
	total := max(0.5, 100*float64(took)/float64(s.Max))
	checks := min(it.CheckTime(), took)
	model := min(it.ModelTime(), took-checks)
	c := total * float64(checks) / float64(took)
	m := total * float64(model) / float64(took)
	return iterationBar{Model: m, Work: total - c - m, Checks: c}
}

// svgNum formats a bar coordinate.
func svgNum(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

// barTitle is what hovering an iteration's bar tells: when it started, how
// long it took (so far), its checks' share, its model calls, tokens and cost.
func (s barScale) title(it IterationView) string {
	now := s.Now
	var parts []string
	if !it.StartedAt.IsZero() {
		parts = append(parts, "Started "+exact(it.StartedAt))
	}
	took := Duration(it.Took(now))
	if it.EndedAt.IsZero() && !it.StartedAt.IsZero() {
		took += " so far"
	}
	parts = append(parts, "took "+took)
	if c := it.CheckTime(); c > 0 {
		parts = append(parts, "checks "+Duration(c))
	}
	m := it.Metrics
	if m.LLMCalls > 0 {
		calls := plural(m.LLMCalls, "model call", "model calls")
		if mt := it.ModelTime(); mt > 0 {
			calls += " (" + Duration(mt) + ")"
		}
		parts = append(parts, calls)
	}
	cost := Dollars(m.CostTotalUSD)
	if s.Unmeasured {
		cost = "cost not measured"
	}
	parts = append(parts, Count(m.TokensTotal)+" tokens", cost)
	return strings.Join(parts, " · ")
}
