// Package views renders pages as templ components from plain structs. It
// never touches the database.
package views

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"homework/engine/spec"
)

func itoa(n int) string { return strconv.Itoa(n) }

// StatusTitle returns a friendly heading for an HTTP status.
func StatusTitle(status int) string {
	switch status {
	case 400:
		return "That request did not make sense"
	case 401:
		return "Please sign in"
	case 403:
		return "Not allowed"
	case 404:
		return "Not found"
	case 409:
		return "Not possible right now"
	case 429:
		return "Too many attempts"
	case 503:
		return "Not available"
	}
	if status >= 500 {
		return "Something went wrong on our side"
	}
	return "Error"
}

// iso formats t for a <time datetime> attribute.
func iso(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// exact formats t for the title shown on hover (and without JavaScript).
func exact(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// Money formats a cost in US dollars: cents from $0.01 up, and an amount
// below a cent with three significant digits ($0.00321), so that a small
// spend or limit never reads as $0.00.
func Money(v float64) string {
	return "$" + amount(v)
}

// amount is Money without the dollar sign.
func amount(v float64) string {
	if v > 0 && v < 0.01 {
		// Three significant digits: 0.00321 has its first at the third
		// decimal, so five decimals.
		decimals := 2 - int(math.Floor(math.Log10(v)))
		s := strconv.FormatFloat(v, 'f', decimals, 64)
		if r, _ := strconv.ParseFloat(s, 64); r < 0.01 { // 0.009996 rounds to a cent
			return s
		}
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// Count formats a large count compactly (12.3k, 4.5M).
func Count(n int64) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 10_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatInt(n, 10)
}

// Duration formats a duration for people (1h 5m, 4m 2s, 850ms).
func Duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
}

// StatusLabel returns the words shown for a run status. A stopped run whose
// stop reason is no_progress or stuck is "Stalled".
func StatusLabel(status, stopType string) string {
	if isStalled(status, stopType) {
		return "Stalled"
	}
	switch status {
	case spec.StatusQueued:
		return "Queued"
	case spec.StatusRunning:
		return "Running"
	case spec.StatusWaiting:
		return "Waiting for you"
	case spec.StatusStopped:
		return "Stopped"
	case spec.StatusCompleted:
		return "Completed"
	case spec.StatusFailed:
		return "Failed"
	case spec.StatusCanceled:
		return "Canceled"
	}
	return status
}

// StatusClass returns the badge class for a run status.
func StatusClass(status, stopType string) string {
	if isStalled(status, stopType) {
		return "stalled"
	}
	return status
}

func isStalled(status, stopType string) bool {
	return status == spec.StatusStopped && (stopType == spec.StopNoProgress || stopType == spec.StopStuck)
}

// percentClass returns a CSS width class (w0, w5, ... w100) for used/limit.
func percent(used, limit float64) int {
	if limit <= 0 {
		return 0
	}
	p := int(used / limit * 100)
	return max(0, min(p, 100))
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// Humanize turns a snake_case reason into words.
func Humanize(s string) string {
	s = strings.ReplaceAll(s, "_", " ")
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func queryEscape(s string) string { return url.QueryEscape(s) }

func ariaCurrent(b bool) string {
	if b {
		return "page"
	}
	return "false"
}

// clip shortens s to at most n runes, with an ellipsis.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func stopType(r *spec.Run) string {
	if r.StopReason == nil {
		return ""
	}
	return r.StopReason.Type
}

func modelPlaceholder(def string) string {
	if def == "" {
		return "server default"
	}
	return def + " (default)"
}

func waitingText(w *spec.Waiting) string {
	if w.Detail != "" {
		return w.Detail
	}
	switch w.Reason {
	case spec.WaitNeedsInput:
		return "the run needs your input to go on."
	case spec.WaitBlocked:
		return "the run is blocked."
	case spec.WaitApprovePlan:
		return "approve the plan (or steer it) to go on."
	case spec.WaitTurnEnded:
		return "the iteration is done; reply to run the next one."
	case spec.WaitBudgetForecast:
		return "the next iteration would not fit in the budget."
	}
	return Humanize(w.Reason)
}

func stopHeading(status string) string {
	switch status {
	case spec.StatusCompleted:
		return "Completed"
	case spec.StatusFailed:
		return "Failed"
	case spec.StatusCanceled:
		return "Canceled"
	}
	return "Stopped"
}

func taskMark(status string) string {
	switch status {
	case spec.TaskDone:
		return "☑"
	case spec.TaskBlocked:
		return "☒"
	}
	return "☐"
}

func checkMark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func passText(ok bool) string {
	if ok {
		return "passed"
	}
	return "failed"
}

func whyLabel(decision string) string {
	switch decision {
	case "continue":
		return "Why we continued"
	case "complete":
		return "Why we stopped: complete"
	case "wait":
		return "Why we waited for you"
	case "fail":
		return "Why the run failed"
	}
	return "Why we stopped"
}

func refTitle(r spec.Ref) string {
	switch {
	case r.Title != "":
		return r.Title
	case r.Path != "":
		return r.Path
	}
	return r.ID
}

func docTitle(d *spec.Document) string {
	switch {
	case d.Title != "":
		return d.Title
	case d.Path != "":
		return d.Path
	}
	return "Workspace"
}

func docPath(d *spec.Document) string {
	if d.Path == "" {
		return "/"
	}
	return d.Path
}

// revokeQuestion is the confirmation a token's Revoke asks first.
func revokeQuestion(name string) string {
	if name == "" {
		name = "(no name)"
	}
	return "Revoke the token “" + name + "”? Scripts and dashboards using it are refused from then on; this cannot be undone."
}

// minFor is a number field's min for its step: an amount ("any") must be
// above zero, which the server checks; a count starts at its step.
func minFor(step string) string {
	if step == "any" {
		return "0"
	}
	return step
}

func budgetPlaceholder(cfg *spec.Config, which string) string {
	if cfg == nil {
		return ""
	}
	b := cfg.Budgets
	switch which {
	case "iterations":
		if b.MaxIterations > 0 {
			return "now " + itoa(b.MaxIterations)
		}
	case "minutes":
		if b.MaxRunningMS > 0 {
			return "now " + strconv.FormatInt(b.MaxRunningMS/60000, 10)
		}
	case "cost":
		if b.MaxCostUSD > 0 {
			return "now " + amount(b.MaxCostUSD)
		}
	case "tokens":
		if b.MaxTotalTokens > 0 {
			return "now " + strconv.FormatInt(b.MaxTotalTokens, 10)
		}
	}
	return ""
}

// safeAction keeps a notification's action URL on this site.
func safeAction(u string) string {
	if strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "//") {
		return u
	}
	return "/notifications"
}

// toggleSort returns the order a column header links to: first when the
// list is not sorted by this column's first order, else second.
func toggleSort(current, first, second string) string {
	if current == first {
		return second
	}
	return first
}

// sortArrow marks the column the list is sorted by.
func sortArrow(current, desc, asc string) string {
	switch current {
	case desc:
		return " ↓"
	case asc:
		return " ↑"
	}
	return ""
}

// ariaSort is a column header's aria-sort value.
func ariaSort(current, desc, asc string) string {
	switch current {
	case desc:
		return "descending"
	case asc:
		return "ascending"
	}
	return "none"
}
