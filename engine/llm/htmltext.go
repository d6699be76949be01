package llm

import (
	"strings"

	"golang.org/x/net/html"
)

// htmlText returns the readable text of an HTML document for web_fetch:
// script, style and other non-content elements are dropped, character
// references (named and numeric, such as &#8217;) are decoded by the HTML
// tokenizer, block elements end a line, and runs of blank lines are folded.
func htmlText(doc string) string {
	z := html.NewTokenizer(strings.NewReader(doc))
	var b strings.Builder
	skip := 0 // depth inside elements whose text is not content
	for {
		switch z.Next() {
		case html.ErrorToken:
			return foldBlankLines(b.String())
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			if hiddenElements[string(name)] && z.Token().Type == html.StartTagToken {
				skip++
			}
			if blockElements[string(name)] {
				b.WriteByte('\n')
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if hiddenElements[string(name)] && skip > 0 {
				skip--
			}
			if blockElements[string(name)] {
				b.WriteByte('\n')
			}
		case html.TextToken:
			if skip == 0 {
				b.Write(z.Text())
			}
		}
	}
}

var hiddenElements = map[string]bool{"script": true, "style": true, "noscript": true, "template": true, "svg": true}

var blockElements = map[string]bool{"p": true, "div": true, "br": true, "li": true, "ul": true, "ol": true, "tr": true,
	"table": true, "h1": true, "h2": true, "h3": true, "h4": true, "h5": true, "h6": true, "section": true, "article": true,
	"header": true, "footer": true, "pre": true, "blockquote": true, "title": true, "hr": true, "dd": true, "dt": true}

// foldBlankLines trims each line's trailing space and keeps at most one
// blank line in a row.
func foldBlankLines(s string) string {
	var out []string
	blank := 0
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimRight(strings.Join(strings.Fields(l), " "), " ")
		if l == "" {
			blank++
			if blank > 1 {
				continue
			}
		} else {
			blank = 0
		}
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}
