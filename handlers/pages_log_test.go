package handlers

import (
	"net/http"
	"strings"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// TestRunLogFragment reads the run page's log fragment: styled spans, no
// escape text, escaped markup, numbered line anchors, and a block that
// ended mid-line offered again.
func TestRunLogFragment(t *testing.T) {
	ts := newPageServer(t)
	pc := ts.signedIn(t, "ada@example.com")
	u := ts.userID(t, "ada@example.com")
	step := doneStep("coloured")
	step.Transcript = []scripted.Line{{Kind: spec.TranscriptAssistant, Text: "two\nlines <b>not bold</b>"}}
	step.Stream = "\x1b[31mred\x1b[0m \x1b[1mbold\x1b[0m \x1b[38;5;208morange\x1b[0m <script>alert(1)</script>\n" +
		"\x1b]8;;javascript:alert(1)\x1b\\bad link\x1b]8;;\x1b\\ \x1b]8;;https://example.com/\x1b\\good link\x1b]8;;\x1b\\\n"
	run, err := ts.Engine.CreateRun(ts.ctx, u.User, spec.Config{Objective: "Colours", Executor: spec.ExecutorScript, Script: script(step)})
	if err != nil {
		t.Fatal(err)
	}
	ts.waitStatus(t, u, run.ID, spec.StatusCompleted)
	resp, body := pc.get("/runs/" + run.ID + "/iterations/1/log")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body,
		`<span class="term-fg31">red</span>`, `<span class="term-fg1">bold</span>`, `<span class="term-fgx208">orange</span>`,
		`&lt;script&gt;alert(1)&lt;/script&gt;`, `lines &lt;b&gt;not bold&lt;&#47;b&gt;`,
		`<a href="https://example.com/" rel="nofollow noreferrer noopener" target="_blank">good link</a>`,
		`id="i1-L1"`, `href="#i1-L1"`, `id="i1-L2"`, `id="i1-L3"`, `id="i1-L4"`)
	expectLacks(t, body, "\x1b", "[31m", "<script>", "javascript:", `id="i1-L0"`)

	t.Run("lines are numbered on from ?line=", func(t *testing.T) {
		_, body := pc.get("/runs/" + run.ID + "/iterations/1/log?after=1&line=2")
		expectContains(t, body, `id="i1-L3"`)
		expectLacks(t, body, `id="i1-L1"`, `id="i1-L2"`)
	})
}

func TestLogBlocksAreWhatATerminalShows(t *testing.T) {
	out := func(text string) *spec.TranscriptLine {
		return &spec.TranscriptLine{Kind: spec.TranscriptOutput, Name: "stdout", Text: text}
	}
	for _, tc := range []struct {
		name   string
		recs   []*spec.TranscriptLine
		blocks []string // each block's lines, joined by |
		open   bool     // the last block may go on
	}{
		{"a progress line over chunks is one line", []*spec.TranscriptLine{out("10%"), out("\r50%"), out("\r100%\n")}, []string{"100%"}, false},
		{"a chunk that ends mid-line is open", []*spec.TranscriptLine{out("a\n"), out("b")}, []string{"a", "b"}, true},
		{"another stream starts a block", []*spec.TranscriptLine{out("a"), {Kind: spec.TranscriptOutput, Name: "stderr", Text: "e\n"}}, []string{"a", "e"}, false},
		{"a blank line counts", []*spec.TranscriptLine{out("a\n\nb\n")}, []string{"a|&nbsp;|b"}, false},
		{"an erased line is gone", []*spec.TranscriptLine{out("typo\x1b[2K\rfixed\n")}, []string{"fixed"}, false},
		{"controls are shown, not sent", []*spec.TranscriptLine{out("bell\x07 nul\x00\n")}, []string{`bell\x07 nul\x00`}, false},
		{"an empty record has no lines", []*spec.TranscriptLine{{Kind: spec.TranscriptNote, Text: ""}}, []string{""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blocks := groupBlocks(tc.recs)
			var got []string
			for _, b := range blocks {
				got = append(got, strings.Join(renderTerminal().HTMLLines(b.text()), "|"))
			}
			if strings.Join(got, "\n") != strings.Join(tc.blocks, "\n") {
				t.Fatalf("blocks %q, want %q", got, tc.blocks)
			}
			if open := blocks[len(blocks)-1].open(); open != tc.open {
				t.Fatalf("open = %v, want %v", open, tc.open)
			}
		})
	}
}
