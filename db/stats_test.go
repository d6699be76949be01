package db

import (
	"testing"
	"time"

	"homework/engine/spec"
)

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		name   string
		values []float64
		p      int
		want   float64
	}{
		{"no values give 0", nil, 50, 0},
		{"one value is every percentile", []float64{7}, 50, 7},
		{"one value is every percentile (p95)", []float64{7}, 95, 7},
		{"the median of an odd-sized set is its middle", []float64{5, 1, 3}, 50, 3},
		{"the median of an even-sized set is the lower middle", []float64{4, 1, 3, 2}, 50, 2},
		{"p95 of four values is the largest", []float64{4, 1, 3, 2}, 95, 4},
		{"p95 of twenty values is the 19th", seq(20), 95, 19},
		{"p50 of twenty values is the 10th", seq(20), 50, 10},
		{"p95 of a hundred values is the 95th", seq(100), 95, 95},
		{"p95 of two values is the larger", []float64{10, 20}, 95, 20},
		{"p50 of two values is the smaller", []float64{20, 10}, 50, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := spec.Percentile(append([]float64(nil), c.values...), c.p); got != c.want {
				t.Fatalf("spec.Percentile(%v, %d) = %g, want %g", c.values, c.p, got, c.want)
			}
		})
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[n-1-i] = float64(i + 1) // descending, so spec.Percentile must sort
	}
	return out
}

func TestSummarizeZeroDenominators(t *testing.T) {
	f := spec.Summarize(nil)
	if f.Runs != 0 || f.CompletionRate != 0 || f.FalseCompletionRate != 0 || f.EscalationRate != 0 ||
		f.CostUSD.PerCompletedRun != 0 || f.ToolCalls.PerRun != 0 || f.StopReasons == nil {
		t.Fatalf("empty figures = %+v", f)
	}
}

func TestGroupRows(t *testing.T) {
	mon := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	rows := []spec.StatsRow{
		{RunID: "a", Executor: "llm", Tags: []string{"x", "y"}, CreatedAt: mon},
		{RunID: "b", Executor: "command", Tags: []string{}, CreatedAt: mon.AddDate(0, 0, -1)},
	}
	keys, groups := spec.GroupRows(rows, spec.GroupByTag)
	if len(keys) != 3 || keys[0] != "" || len(groups["x"]) != 1 || len(groups[""]) != 1 {
		t.Fatalf("tag groups = %v %v", keys, groups)
	}
	keys, _ = spec.GroupRows(rows, spec.GroupByWeek)
	if len(keys) != 2 || keys[0] != "2026-W47" || keys[1] != "2026-W48" {
		t.Fatalf("week keys = %v, want [2026-W47 2026-W48]", keys)
	}
}
