package handlers

import (
	"regexp"
	"strings"
	"sync"

	terminal "github.com/buildkite/terminal-to-html/v3"
	"github.com/microcosm-cc/bluemonday"

	"homework/engine/spec"
	textutil "homework/engine/text"
)

// The transcript is shown the way a terminal shows it: SGR colours and
// styles, carriage-return progress lines and cursor moves are interpreted by
// terminal-to-html (what Buildkite's log pages use), which escapes the text
// and marks styles with its own classes (term-fg31, term-fgx196, term-fg1…).
// Its HTML then goes through a bluemonday policy that keeps only those
// spans and plain http(s) links, so nothing an agent prints reaches the
// page as markup or style of its own.

// termRenderer renders transcript text as terminal lines.
type termRenderer struct {
	policy *bluemonday.Policy
}

// renderTerminal is the shared terminal renderer; bluemonday policies are
// safe for concurrent use once built.
var renderTerminal = sync.OnceValue(newTermRenderer)

func newTermRenderer() *termRenderer {
	p := bluemonday.NewPolicy()
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^term-[a-z0-9]+( term-[a-z0-9]+)*$`)).OnElements("span")
	p.AllowAttrs("href").OnElements("a")
	p.AllowURLSchemes("http", "https")
	p.RequireParseableURLs(true)
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	return &termRenderer{policy: p}
}

// screen interprets text as a terminal would.
func screen(text string) *terminal.Screen {
	s, err := terminal.NewScreen()
	if err != nil {
		panic("terminal screen: " + err.Error()) // only with invalid options
	}
	s.Write([]byte(text))
	return s
}

// visible shows what the terminal left of control characters (a NUL, a
// BEL outside a sequence, an ESC that starts none) as escapes, never as
// the raw bytes.
func visible(s string) string {
	return strings.ReplaceAll(textutil.VisibleControls(s), "\x1b", `\x1b`)
}

// HTMLLines returns text's lines as a terminal shows them, each as safe
// HTML; none for empty text.
func (r *termRenderer) HTMLLines(text string) []string {
	out := screen(text).AsHTMLWithTimestamps(false)
	if out == "" {
		return nil
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		l = visible(l)
		// terminal-to-html escapes text itself (&, <, >, quotes): a line
		// without '<' is plain escaped text, with nothing to sanitise.
		if strings.IndexByte(l, '<') >= 0 {
			l = r.policy.Sanitize(l)
		}
		lines[i] = l
	}
	return lines
}

// PlainText returns text as a terminal shows it, without styles: what a
// downloaded log holds.
func PlainText(text string) string {
	return visible(screen(text).AsPlainText())
}

// logBlock is what the log shows as one piece: one transcript record, or
// consecutive chunks of one output stream that continue one another (each
// but the last ends mid-line, as a progress line redrawn with carriage
// returns does), interpreted together as one terminal would.
type logBlock struct {
	recs []*spec.TranscriptLine
}

// continues reports whether l continues the block: both are output of the
// same stream and attempt, and the block's last chunk ended mid-line.
func (b *logBlock) continues(l *spec.TranscriptLine) bool {
	last := b.recs[len(b.recs)-1]
	return l.Kind == spec.TranscriptOutput && last.Kind == spec.TranscriptOutput && l.Name == last.Name &&
		l.Attempt == last.Attempt && !strings.HasSuffix(last.Text, "\n")
}

// open reports whether the block may continue in a record not yet read:
// its last chunk of output ended mid-line.
func (b *logBlock) open() bool {
	last := b.recs[len(b.recs)-1]
	return last.Kind == spec.TranscriptOutput && !strings.HasSuffix(last.Text, "\n")
}

// text is the block's records' text, joined as written.
func (b *logBlock) text() string {
	if len(b.recs) == 1 {
		return b.recs[0].Text
	}
	var sb strings.Builder
	for _, r := range b.recs {
		sb.WriteString(r.Text)
	}
	return sb.String()
}

// groupBlocks groups transcript records, in order, into log blocks.
func groupBlocks(lines []*spec.TranscriptLine) []*logBlock {
	var out []*logBlock
	for _, l := range lines {
		if n := len(out); n > 0 && out[n-1].continues(l) {
			out[n-1].recs = append(out[n-1].recs, l)
			continue
		}
		out = append(out, &logBlock{recs: []*spec.TranscriptLine{l}})
	}
	return out
}
