package mcp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// FormatResult renders a tool result as text for the model: text content
// as is, resource links and embedded text resources with their URIs,
// images, audio and binary resources as a short placeholder, and the
// structured content as JSON unless a text part already holds it.
func FormatResult(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes, not shown]", orUnknown(c.MIMEType), len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes, not shown]", orUnknown(c.MIMEType), len(c.Data)))
		case *sdk.ResourceLink:
			s := "[resource link] " + c.URI
			if c.Name != "" {
				s += " (" + c.Name + ")"
			}
			if c.Description != "" {
				s += ": " + c.Description
			}
			parts = append(parts, s)
		case *sdk.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
			case r.Text != "":
				parts = append(parts, fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text))
			default:
				parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes, not shown]", r.URI, orUnknown(r.MIMEType), len(r.Blob)))
			}
		default:
			if b, err := json.Marshal(c); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil && !holdsJSON(parts, b) {
			parts = append(parts, "structured content: "+string(b))
		}
	}
	out := strings.Join(parts, "\n")
	if strings.TrimSpace(out) == "" {
		if res.IsError {
			return "the tool failed without saying why"
		}
		return "(the tool returned no content)"
	}
	return out
}

// holdsJSON reports whether a text part is the JSON value b.
func holdsJSON(parts []string, b []byte) bool {
	var want any
	if json.Unmarshal(b, &want) != nil {
		return false
	}
	for _, p := range parts {
		var got any
		if json.Unmarshal([]byte(p), &got) == nil && reflect.DeepEqual(got, want) {
			return true
		}
	}
	return false
}

func orUnknown(s string) string {
	if s == "" {
		return "of unknown type"
	}
	return s
}
