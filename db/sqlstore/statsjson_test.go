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

func TestJSONMember(t *testing.T) {
	for _, c := range []struct{ doc, key, want string }{
		{`{"type":"budget_cost","detail":"x"}`, "type", "budget_cost"},
		{` { "detail" : "a \"type\": no" , "type" : "completed" } `, "type", "completed"},
		{`{"typ\u0065":"escaped key"}`, "type", "escaped key"}, // encoding/json decides
		{`{"type":"tab\tand \u00e9"}`, "type", "tab\tand é"},
		{`{"type":null}`, "type", ""},
		{`{"type":5}`, "type", "5"},
		{`{"detail":"x"}`, "type", ""},
		{`null`, "type", ""},
		{`{}`, "type", ""},
		{`[1,2]`, "type", ""},
	} {
		got, err := jsonPath(c.doc, c.key)
		if err != nil || got != c.want {
			t.Errorf("jsonPath(%s, %s) = %q, %v; want %q", c.doc, c.key, got, err, c.want)
		}
	}
	if b, err := jsonPath(`{"type":"budget_cost","evidence":{"threshold":3,"breaker":"forecast"}}`, "evidence", "breaker"); err != nil || b != "forecast" {
		t.Errorf("nested member = %q, %v", b, err)
	}
	if _, err := jsonPath(`{"type":`, "type"); err == nil {
		t.Error("malformed JSON: no error")
	}
	for s, want := range map[string]bool{`{"budgets":{"max_iterations":3}}`: false, `{"max_cost_usd":1}`: true,
		`{"max_"max_total_tokens":1}`: true, `max_cost_usd`: false, `{"a":"max_total_tokens\""}`: false} {
		if namesBudget(s) != want {
			t.Errorf("namesBudget(%s) = %v", s, !want)
		}
	}
}
