package sqlstore

import (
	"encoding/json"
	"testing"

	"homework/engine/spec"
)

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
