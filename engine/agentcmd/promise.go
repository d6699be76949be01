package agentcmd

import (
	"regexp"
	"strings"

	"homework/engine/spec"
)

var (
	promiseRE = regexp.MustCompile(`(?i)<promise>\s*([^<>\n]{1,100}?)\s*</promise>`)
	commentRE = regexp.MustCompile(`(?s)<!--.*?-->`)
	reasonRE  = regexp.MustCompile(`(?i)^\s*(reason|summary)\s*:\s*`)
)

const (
	maxReasonLines = 8
	maxReasonBytes = 1000
	// echoContext is how many bytes either side of a promise tag are
	// compared with the prompt to recognise a quoted instruction.
	echoContext = 16
)

// DetectPromise returns the promise a command agent's output makes, or nil.
// <promise>COMPLETE</promise> (or <promise>TOKEN</promise> when the run has
// a completion token) and <promise>BLOCKED</promise> are matched without
// regard to case; BLOCKED wins over COMPLETE. The promise's Reason is the
// text after the tag: the rest of its line and the following lines up to a
// blank line (bounded), without a leading "Reason:" or "Summary:".
//
// Promises do not count inside HTML comments, nor when they only echo the
// prompt: every verbatim copy of the prompt is removed from the output; a
// tag whose surrounding text also surrounds a tag in the prompt (a quoted
// instruction) is ignored; and a line consisting of nothing but a tag that
// the prompt also has on a line of its own counts only beyond the number of
// times the prompt has it.
func DetectPromise(output, prompt, token string) *spec.Promise {
	out := strings.ReplaceAll(output, "\r\n", "\n")
	out = commentRE.ReplaceAllString(out, "")
	p := strings.ReplaceAll(prompt, "\r\n", "\n")
	if pt := strings.TrimSpace(p); pt != "" {
		out = strings.ReplaceAll(out, pt, "")
	}
	lowPrompt := strings.ToLower(commentRE.ReplaceAllString(p, ""))

	// Bare promise lines of the prompt: an echo of one is indistinguishable
	// from the real thing, so each prompt occurrence cancels one output
	// occurrence.
	bare := map[string]int{}
	for _, line := range strings.Split(lowPrompt, "\n") {
		t := strings.TrimSpace(line)
		if promiseRE.MatchString(t) && strings.TrimSpace(promiseRE.ReplaceAllString(t, "")) == "" {
			bare[t]++
		}
	}

	word := spec.PromiseComplete
	if token = strings.TrimSpace(token); token != "" {
		word = token
	}
	var complete, blocked *spec.Promise
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		locs := promiseRE.FindAllStringSubmatchIndex(line, -1)
		if locs == nil {
			continue
		}
		low := strings.ToLower(line)
		t := strings.TrimSpace(low)
		isBare := strings.TrimSpace(promiseRE.ReplaceAllString(t, "")) == ""
		if isBare && bare[t] > 0 {
			bare[t]--
			continue
		}
		for _, loc := range locs {
			if !isBare && quotesPrompt(low, loc[0], loc[1], lowPrompt) {
				continue
			}
			kind := strings.TrimSpace(line[loc[2]:loc[3]])
			switch {
			case strings.EqualFold(kind, spec.PromiseBlocked):
				if blocked == nil {
					blocked = &spec.Promise{Kind: spec.PromiseBlocked, Reason: reasonAfter(lines, i, loc[1])}
				}
			case strings.EqualFold(kind, spec.PromiseComplete) || strings.EqualFold(kind, word):
				// The last completion claim carries the freshest summary.
				complete = &spec.Promise{Kind: spec.PromiseComplete, Reason: reasonAfter(lines, i, loc[1])}
			}
		}
	}
	if blocked != nil {
		return blocked
	}
	return complete
}

// quotesPrompt reports whether the tag at line[start:end] sits in text the
// prompt also has around a tag: the agent quoting an instruction sentence.
func quotesPrompt(line string, start, end int, prompt string) bool {
	a := max(start-echoContext, 0)
	b := min(end+echoContext, len(line))
	if a == start && b == end {
		return false
	}
	return strings.Contains(prompt, line[a:b])
}

// reasonAfter returns the text after a promise tag ending at lines[i][end:]:
// the rest of the line and the following lines up to a blank line or another
// promise, bounded.
func reasonAfter(lines []string, i, end int) string {
	var parts []string
	if rest := strings.TrimSpace(lines[i][end:]); rest != "" {
		parts = append(parts, rest)
	}
	for j := i + 1; j < len(lines) && len(parts) < maxReasonLines; j++ {
		l := strings.TrimSpace(lines[j])
		if l == "" {
			if len(parts) == 0 {
				continue // allow one blank line between the tag and the reason
			}
			break
		}
		if promiseRE.MatchString(l) {
			break
		}
		parts = append(parts, l)
		if j > i+maxReasonLines {
			break
		}
	}
	if len(parts) > 0 {
		parts[0] = reasonRE.ReplaceAllString(parts[0], "")
	}
	return truncate(strings.TrimSpace(strings.Join(parts, "\n")), maxReasonBytes)
}
