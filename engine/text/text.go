// Package text holds the small string helpers every package used to copy:
// cutting text to a size, folding it onto one line, and normalising error
// messages for fingerprints.
package text

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Ellipsis marks text that was cut.
const Ellipsis = "…"

// Truncate returns s when it is at most n bytes long, and otherwise its
// first n bytes, cut back to a rune boundary, followed by Ellipsis.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}

// Collapse folds every run of white space (newlines included) into one
// space and trims the ends.
func Collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// OneLine is Collapse followed by Truncate.
func OneLine(s string, n int) string { return Truncate(Collapse(s), n) }

var (
	uuidRE   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F-]{27,}`)
	hexRE    = regexp.MustCompile(`\b[0-9a-fA-F]{12,}\b`)
	numberRE = regexp.MustCompile(`\d+`)
	quotedRE = regexp.MustCompile(`"[^"]*"|'[^']*'`)
)

// NormalizeError makes an error message stable across occurrences, for
// error fingerprints: ids, long hex strings, quoted values and numbers are
// replaced by placeholders, white space collapsed, the text lower-cased and
// cut to 160 bytes.
func NormalizeError(s string) string {
	s = uuidRE.ReplaceAllString(s, "<id>")
	s = hexRE.ReplaceAllString(s, "<hex>")
	s = quotedRE.ReplaceAllString(s, "<v>")
	s = numberRE.ReplaceAllString(s, "<n>")
	return Truncate(strings.ToLower(Collapse(s)), 160)
}

// VisibleControls returns s with its control characters shown as escapes
// (\x00, \x7f, \u0085) and each byte of invalid UTF-8 as \xNN, so a
// terminal or a browser shows them instead of acting on them or dropping
// them. TAB, LF, CR and ESC (which starts the ANSI colour sequences agents
// print) are kept as they are.
func VisibleControls(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && !keptControl(r)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) && !keptControl(r):
			if r < 0x80 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func keptControl(r rune) bool { return r == '\t' || r == '\n' || r == '\r' || r == 0x1b }
