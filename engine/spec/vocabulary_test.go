package spec_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"homework/engine/spec"
)

func TestErrorModel(t *testing.T) {
	t.Run("a wrapped cause reaches logs and errors.Is but never the message", func(t *testing.T) {
		cause := fmt.Errorf("open workdir: %w", fs.ErrPermission)
		err := fmt.Errorf("start run: %w", spec.WrapError(cause, spec.EFORBIDDEN, "The work directory cannot be read."))
		if got := spec.ErrorCode(err); got != spec.EFORBIDDEN {
			t.Errorf("ErrorCode = %q, want %q", got, spec.EFORBIDDEN)
		}
		if got := spec.ErrorMessage(err); got != "The work directory cannot be read." {
			t.Errorf("ErrorMessage = %q", got)
		}
		if !errors.Is(err, fs.ErrPermission) {
			t.Error("errors.Is does not find the cause")
		}
		if !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("Error() = %q, want the cause for logs", err.Error())
		}
	})
	t.Run("any other error is internal and its text is hidden", func(t *testing.T) {
		err := errors.New("sql: database is locked")
		if spec.ErrorCode(err) != spec.EINTERNAL || spec.ErrorMessage(err) != "Internal error." || spec.ErrorField(err) != "" {
			t.Errorf("got code %q message %q field %q", spec.ErrorCode(err), spec.ErrorMessage(err), spec.ErrorField(err))
		}
	})
	t.Run("nil has no code", func(t *testing.T) {
		if spec.ErrorCode(nil) != "" || spec.ErrorMessage(nil) != "" {
			t.Error("nil error has a code or message")
		}
	})
	t.Run("a field error names its field", func(t *testing.T) {
		err := spec.FieldError("budgets.max_iterations", "Must be at most %d.", 10)
		if spec.ErrorField(err) != "budgets.max_iterations" || spec.ErrorCode(err) != spec.EINVALID || err.Message != "Must be at most 10." {
			t.Errorf("got %+v", err)
		}
	})
}

func TestMetricsAdd(t *testing.T) {
	var m spec.Metrics
	m.AddCall("a", 100, 20, 0.5, true)
	m.AddCall("b", 10, 2, 0, false)
	m.Add(spec.Metrics{Iterations: 2, RunningMS: 300, ToolCallsTotal: 4, FalseCompletionsBlocked: 1,
		ByModel: map[string]spec.ModelUsage{"a": {Calls: 1, PromptTokens: 1, CompletionTokens: 1, CostUSD: 0.25}}})
	want := spec.Metrics{Iterations: 2, RunningMS: 300, PromptTokens: 110, CompletionTokens: 22, TokensTotal: 132,
		CostTotalUSD: 0.5, UnpricedCalls: 1, LLMCalls: 2, ToolCallsTotal: 4, FalseCompletionsBlocked: 1}
	got := m
	got.ByModel = nil
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("totals = %+v\nwant     %+v", got, want)
	}
	if a := m.ByModel["a"]; a.Calls != 2 || a.PromptTokens != 101 || a.CostUSD != 0.75 || a.Unpriced {
		t.Errorf("model a = %+v", a)
	}
	if b := m.ByModel["b"]; b.Calls != 1 || !b.Unpriced {
		t.Errorf("model b = %+v", b)
	}
}

// TestMetricsSubUndoesAdd: taking a part away leaves what was there
// before it was added, a model it brought in included.
func TestMetricsSubUndoesAdd(t *testing.T) {
	var before spec.Metrics
	before.AddLLMCall(spec.LLMCall{Model: "a", PromptTokens: 100, CompletionTokens: 20, CachedTokens: 30, CostUSD: 0.5, Priced: true, LatencyMS: 40})
	before.Add(spec.Metrics{Iterations: 2, RunningMS: 300, ToolCallsTotal: 4})
	var part spec.Metrics
	part.AddLLMCall(spec.LLMCall{Model: "a", PromptTokens: 7, CompletionTokens: 3, ReasoningTokens: 2, CostUSD: 0.25, Priced: true, LatencyMS: 5})
	part.AddLLMCall(spec.LLMCall{Model: "b", PromptTokens: 10, CompletionTokens: 2, CostUSD: 0.125, CostSource: spec.CostSourceCLI, LatencyMS: 5})
	part.Add(spec.Metrics{Iterations: 1, RunningMS: 50, ToolCallsTotal: 1, FalseCompletionsBlocked: 1})
	m := before.Clone()
	m.Add(part)
	m.Sub(part)
	if fmt.Sprintf("%+v", m) != fmt.Sprintf("%+v", before) {
		t.Errorf("after Add and Sub: %+v\nwant                %+v", m, before)
	}
}

func TestStatusEvents(t *testing.T) {
	for _, status := range spec.Statuses {
		typ := spec.StatusEvent(status)
		switch status {
		case spec.StatusQueued, spec.StatusRunning:
			if typ != "" {
				t.Errorf("StatusEvent(%q) = %q, want none", status, typ)
			}
			continue
		}
		if typ == "" {
			t.Errorf("StatusEvent(%q) is empty", status)
		}
		if spec.IsTerminalEvent(typ) != spec.IsTerminalStatus(status) {
			t.Errorf("status %q (terminal %v) has event %q (terminal %v)", status, spec.IsTerminalStatus(status),
				typ, spec.IsTerminalEvent(typ))
		}
	}
}
