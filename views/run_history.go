package views

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"homework/engine/spec"
)

// EventHistory is a page of a run's event history: newest first, of one
// type or all.
type EventHistory struct {
	RunID string
	// Type is the type shown ("": every type); Types are those the run has.
	Type  string
	Types []string
	// Before is the seq the page lists events before (0: the newest).
	Before int64
	Events []*spec.Event
	// Older is the seq the next, older page lists events before (0: none).
	Older int64
}

// pageURL is the history's address for the page before seq before (0:
// the newest).
func (h EventHistory) pageURL(before int64) string {
	q := url.Values{}
	if h.Type != "" {
		q.Set("type", h.Type)
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	u := "/runs/" + h.RunID + "/events"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// Lineage is where a run came from and the follow-ups that came of it.
type Lineage struct {
	Run *spec.Run
	// Ancestors are the run's parent and theirs, the oldest first;
	// MoreAncestors says the chain goes on before the first.
	Ancestors     []*spec.Run
	MoreAncestors bool
	// Children are the run's follow-ups with theirs; MoreChildren is how
	// many more follow-ups the run has.
	Children     []LineageNode
	MoreChildren int
	// MoreAtLeast says the store's list was cut too: MoreChildren is a
	// lower bound.
	MoreAtLeast bool
}

// LineageNode is a follow-up run and its own follow-ups.
type LineageNode struct {
	Run      *spec.Run
	Children []*spec.Run
}

// summaryKeys are the payload fields that say in a word what an event is
// about, most telling first.
var summaryKeys = []string{"summary", "detail", "tool", "path", "title", "decision", "name", "model", "body", "status", "error", "reason"}

// eventSummary is an event's payload in one line: its most telling field,
// else its scalar fields as key: value; never the raw JSON.
func eventSummary(e *spec.Event) string {
	var m map[string]any
	if err := json.Unmarshal(e.Data, &m); err != nil || len(m) == 0 {
		return ""
	}
	var parts []string
	if it, ok := m["iteration"].(float64); ok && it > 0 {
		parts = append(parts, "iteration "+strconv.FormatFloat(it, 'f', -1, 64))
	}
	for _, k := range summaryKeys {
		if v, ok := m[k]; ok && scalar(v) != "" {
			return clip(strings.Join(append(parts, scalar(v)), " · "), 140)
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if s := scalar(m[k]); s != "" && k != "iteration" {
			parts = append(parts, k+": "+s)
		}
	}
	return clip(strings.Join(parts, " · "), 140)
}

// scalar formats a JSON string, number or boolean on one line; "" for
// anything else.
func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return strings.Join(strings.Fields(v), " ")
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return fmt.Sprint(v)
	}
	return ""
}

// prettyJSON is an event's payload indented for reading (as it is when it
// is not valid JSON), with the <, > and & that Go's encoder escapes as
// \u003c, \u003e and \u0026 shown as themselves (the page escapes them).
func prettyJSON(data json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, data, "", "  "); err != nil {
		return string(data)
	}
	in := b.Bytes()
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); i++ {
		if in[i] != '\\' || i+1 >= len(in) {
			out = append(out, in[i])
			continue
		}
		if in[i+1] == 'u' && i+6 <= len(in) {
			switch string(in[i+2 : i+6]) {
			case "003c", "003C":
				out, i = append(out, '<'), i+5
				continue
			case "003e", "003E":
				out, i = append(out, '>'), i+5
				continue
			case "0026":
				out, i = append(out, '&'), i+5
				continue
			}
		}
		// Any other escape, an escaped backslash among them, stays whole.
		out, i = append(out, in[i], in[i+1]), i+1
	}
	return string(out)
}

// newestFirst returns events in the reverse of their seq order.
func newestFirst(evs []*spec.Event) []*spec.Event {
	out := slices.Clone(evs)
	slices.SortFunc(out, func(a, b *spec.Event) int { return cmp.Compare(b.Seq, a.Seq) })
	return out
}
