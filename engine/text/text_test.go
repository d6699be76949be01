package text

import "testing"

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer text", 6, "a long…"},
		{"héllo", 2, "h…"}, // é is two bytes: never cut inside it
		{"日本語", 4, "日…"},
		{"abc", 0, "…"},
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine("  first\n\tsecond   third \n", 100); got != "first second third" {
		t.Errorf("OneLine = %q", got)
	}
	if got := OneLine("a\nb c d", 3); got != "a b…" {
		t.Errorf("OneLine cut = %q", got)
	}
}

func TestNormalizeErrorMakesOccurrencesEqual(t *testing.T) {
	a := NormalizeError(`open "/tmp/x1.txt": request 0a1b2c3d-1111-2222-3333-444455556666 failed after 3 tries`)
	b := NormalizeError(`Open '/var/y.txt':  request 9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff failed after 12 tries`)
	if a != b {
		t.Errorf("normalised messages differ:\n%q\n%q", a, b)
	}
	if c := NormalizeError("permission denied"); c == a {
		t.Error("different errors normalise to the same text")
	}
}

func TestVisibleControls(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\tand\r\nlines", "plain text\tand\r\nlines"},
		{"nul\x00here", `nul\x00here`},
		{"bell\a del\x7f", `bell\x07 del\x7f`},
		{"\x1b[31mred\x1b[0m", "\x1b[31mred\x1b[0m"}, // ANSI colours stay
		{"c1 \u0085 next", `c1 \u0085 next`},
		{"bad \xff byte", `bad \xff byte`},
		{"real \ufffd replacement", "real \ufffd replacement"},
		{"日本語", "日本語"},
	} {
		if got := VisibleControls(tc.in); got != tc.want {
			t.Errorf("VisibleControls(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
