package main

import (
	"bytes"
	"homework/engine/spec"
	"strings"
	"testing"

	"github.com/r3labs/sse/v2"
)

func TestTailPrintKeepsEscapeSequencesOffTheTerminal(t *testing.T) {
	var out bytes.Buffer
	tl := &tailer{out: &out}
	tl.print(&sse.Event{Data: []byte(`{"seq":1,"type":"document_created","data":{"path":"notes\u001b]0;pwned\u0007.md\nsecond line"},"created_at":"2026-01-01T00:00:00Z"}`)})
	tl.print(&sse.Event{Data: []byte(`{"seq":2,"type":"iteration_completed","data":{"iteration":1,"status":"ok","summary":"done \u001b[2J\u009b31m"},"created_at":"2026-01-01T00:00:00Z"}`)})
	got := out.String()
	if strings.Count(got, "\n") != 2 {
		t.Fatalf("want two lines, got %q", got)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u009b"} {
		if strings.Contains(got, bad) {
			t.Fatalf("output carries control character %q: %q", bad, got)
		}
	}
	if !strings.Contains(got, "notes?]0;pwned?.md?second line") {
		t.Fatalf("path not shown readably: %q", got)
	}
}

func TestTailPrintRunningTotalsModelErrorsAndAgentOutput(t *testing.T) {
	ev := func(seq int, typ, data string) *sse.Event {
		return &sse.Event{Data: []byte(`{"seq":` + itoa(int64(seq)) + `,"type":"` + typ + `","data":` + data + `,"created_at":"2026-01-01T00:00:00Z"}`)}
	}
	events := []*sse.Event{
		ev(1, "run_started", `{"iteration":1}`),
		ev(2, "llm_call", `{"iteration":1,"role":"executor","model":"m1","prompt_tokens":0,"completion_tokens":0,"cost_usd":0,"error":"429 Too Many Requests: rate limited"}`),
		ev(3, "iteration_completed", `{"iteration":1,"status":"error","decision":"continue","summary":"s","run_metrics":{"iterations":1,"tokens_total":0,"cost_total_usd":0}}`),
		ev(4, "llm_call", `{"iteration":2,"role":"executor","model":"m1","prompt_tokens":100,"completion_tokens":20,"cost_usd":0.25}`),
		ev(5, "iteration_cost_update", `{"iteration":2,"tokens_total":120,"cost_total_usd":0.25}`),
		ev(6, "agent_output", `{"iteration":2,"seq":1,"text":"building…\nok  \u001b[31mhomework\u001b[0m\n"}`),
		ev(7, "run_completed", `{"status":"completed","metrics":{"tokens_total":120,"cost_total_usd":0.25}}`),
	}

	t.Run("from the start the totals begin at zero and follow the events", func(t *testing.T) {
		var out bytes.Buffer
		tl := &tailer{out: &out, known: true}
		for _, e := range events {
			tl.print(e)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		find := func(typ spec.EventType) string {
			for _, l := range lines {
				if strings.Contains(l, " "+string(typ)+" ") {
					return l
				}
			}
			t.Fatalf("no %s line in:\n%s", typ, out.String())
			return ""
		}
		if l := find("iteration_completed"); !strings.Contains(l, "cost so far $0.0000, 0 tokens") {
			t.Fatalf("the first iteration shows later totals: %q", l)
		}
		if l := find("llm_call"); !strings.Contains(l, "FAILED: 429 Too Many Requests: rate limited") {
			t.Fatalf("the failed call's error is not on its line: %q", l)
		}
		if l := find("iteration_cost_update"); !strings.Contains(l, "cost so far $0.2500, 120 tokens") {
			t.Fatalf("cost update: %q", l)
		}
		if !strings.Contains(out.String(), "    │ building…\n    │ ok  ?[31mhomework?[0m\n") {
			t.Fatalf("agent output text not shown (or not sanitized):\n%s", out.String())
		}
		if l := find("run_completed"); !strings.Contains(l, "$0.2500") {
			t.Fatalf("completion: %q", l)
		}
	})
	t.Run("from the middle the totals are unknown until an event says", func(t *testing.T) {
		var out bytes.Buffer
		tl := &tailer{out: &out}
		tl.print(events[0])
		tl.print(events[2])
		tl.print(events[4])
		got := out.String()
		if !strings.Contains(got, "iteration_completed") || strings.Contains(strings.Split(got, "\n")[1], "unknown") {
			// iteration_completed carries run_metrics: known from there on.
			t.Fatalf("iteration_completed should carry the totals:\n%s", got)
		}
		var out2 bytes.Buffer
		tl2 := &tailer{out: &out2, lastSeq: 3}
		tl2.print(ev(4, "gate_decision", `{"iteration":2,"decision":"continue","reasons":["more"]}`))
		if !strings.Contains(out2.String(), "cost so far unknown") {
			t.Fatalf("a total was made up: %s", out2.String())
		}
	})
}
