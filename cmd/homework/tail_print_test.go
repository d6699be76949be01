package main

import (
	"bytes"
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
