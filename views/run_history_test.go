package views

import (
	"encoding/json"
	"testing"

	"homework/engine/spec"
)

func TestPrettyJSON(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"indented, markup as itself", `{"a":"\u003cb\u003e \u0026","n":[1,2]}`, "{\n  \"a\": \"<b> &\",\n  \"n\": [\n    1,\n    2\n  ]\n}"},
		{"an escaped backslash before u003c stays", `{"a":"\\u003c"}`, "{\n  \"a\": \"\\\\u003c\"\n}"},
		{"other escapes stay", `{"a":"\n\"\u00e9"}`, "{\n  \"a\": \"\\n\\\"\\u00e9\"\n}"},
		{"not JSON is shown as it is", `{oops`, `{oops`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := prettyJSON(json.RawMessage(tc.in)); got != tc.want {
				t.Fatalf("prettyJSON(%s) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestEventSummary(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"the most telling field, with the iteration", `{"iteration":2,"name":"check 4","passed":true}`, "iteration 2 · check 4"},
		{"else the scalar fields by name", `{"exit_code":1,"signal":"","nested":{"a":1},"ok":false}`, "exit_code: 1 · ok: false"},
		{"spaces collapse", `{"summary":"two\n  lines"}`, "two lines"},
		{"nothing for an empty payload", `{}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventSummary(&spec.Event{Data: json.RawMessage(tc.data)}); got != tc.want {
				t.Fatalf("eventSummary(%s) = %q, want %q", tc.data, got, tc.want)
			}
		})
	}
}
