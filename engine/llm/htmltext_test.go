package llm

import "testing"

func TestHTMLText(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"numeric and named references are decoded", `<p>It&#8217;s &amp; it&rsquo;s&nbsp;fine</p>`, "It’s & it’s fine"},
		{"scripts and styles are dropped", `<html><head><style>p{}</style><script>var x = "<p>";</script></head><body><p>kept</p></body></html>`, "kept"},
		{"blocks end lines and blank lines fold", "<h1>Title</h1><p>one</p>\n\n\n<p>two <b>bold</b></p><ul><li>a</li><li>b</li></ul>", "Title\n\none\n\ntwo bold\n\na\n\nb"},
		{"a broken document keeps its text", `<div><p>unclosed <i>tags`, "unclosed tags"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := htmlText(c.in); got != c.want {
				t.Errorf("htmlText(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
