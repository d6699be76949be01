package handlers

import (
	"bytes"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
)

// markdown renders documents: GitHub-flavoured markdown without raw HTML,
// then sanitised with bluemonday's user-generated-content policy, so the
// result is safe to insert as HTML.
type markdown struct {
	md     goldmark.Markdown
	policy *bluemonday.Policy
}

func newMarkdown() *markdown {
	p := bluemonday.UGCPolicy()
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	return &markdown{
		md:     goldmark.New(goldmark.WithExtensions(extension.GFM)),
		policy: p,
	}
}

// HTML returns src rendered and sanitised.
func (m *markdown) HTML(src string) string {
	if src == "" {
		return ""
	}
	var buf bytes.Buffer
	if err := m.md.Convert([]byte(src), &buf); err != nil {
		return m.policy.Sanitize("<pre>" + bluemonday.StrictPolicy().Sanitize(src) + "</pre>")
	}
	return string(m.policy.SanitizeBytes(buf.Bytes()))
}
