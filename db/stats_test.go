package db

import (
	"encoding/json"
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

func TestScanMetrics(t *testing.T) {
	full := spec.Metrics{Iterations: 7, RunningMS: 123456, PromptTokens: 5, CompletionTokens: 6, TokensTotal: 11, CostTotalUSD: 0.125,
		ToolCallsTotal: 9, FalseCompletionsBlocked: 2,
		ByModel: map[string]spec.ModelUsage{`we"ird {model}`: {Calls: 1, CostUSD: 0.5}, "b": {Calls: 2}}}
	raw, _ := json.Marshal(full)
	for _, doc := range []string{
		string(raw),
		`{}`,
		` { "iterations" : 3 , "by_model" : {"x":{"calls":[1,{"a":"}"}]}}, "cost_total_usd": 1e-3 } `,
		`{"iterations": 2.5}`,              // not an integer: encoding/json decides (an error)
		`{"iter\u0061tions": 4}`,           // an escaped key: encoding/json decides
		`{"running_ms": 5, "extra": null}`, // literals are skipped
		`{"running_ms": 5,}`,               // malformed: encoding/json's error
	} {
		var fast, want statsMetrics
		errFast := scanMetrics([]byte(doc), &fast)
		errWant := json.Unmarshal([]byte(doc), &want)
		if (errFast == nil) != (errWant == nil) || fast != want {
			t.Errorf("scanMetrics(%s) = %+v, %v; encoding/json gives %+v, %v", doc, fast, errFast, want, errWant)
		}
	}
}
