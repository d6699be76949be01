package views

import (
	"strings"

	"homework/engine/spec"
)

// BulkData is the answer to a bulk action on selected runs: the
// confirmation before it (Confirm), the outcome of each run after it, or
// why the request as a whole was refused (Error).
type BulkData struct {
	Page
	Action  string // cancel | continue
	Budgets BulkBudgets
	Confirm bool
	Results []BulkResult
	Error   string
}

// BulkBudgets are the raised budgets of a bulk Continue as typed.
type BulkBudgets struct {
	MaxIterations, MaxMinutes, MaxCostUSD, MaxTokens string
}

// BulkResult is one selected run: Run is nil when no run of the user's has
// the id; Done tells whether the action was applied, else Reason says why
// not.
type BulkResult struct {
	ID     string
	Run    *spec.Run
	Done   bool
	Reason string
}

// verb is the action's name in a sentence.
func (d BulkData) verb() string {
	if d.Action == "continue" {
		return "Continue"
	}
	return "Cancel"
}

// DoneCount is how many runs the action was applied to.
func (d BulkData) DoneCount() int {
	n := 0
	for _, r := range d.Results {
		if r.Done {
			n++
		}
	}
	return n
}

func (r BulkResult) outcome(action string) string {
	switch {
	case !r.Done:
		return "Refused"
	case action == "continue":
		return "Continued"
	}
	return "Canceled"
}

func bulkDoneText(d BulkData) string {
	done, n := d.DoneCount(), len(d.Results)
	past := "canceled"
	if d.Action == "continue" {
		past = "continued"
	}
	if done == n {
		return plural(n, "run", "runs") + " " + past + "."
	}
	return plural(done, "run", "runs") + " of " + itoa(n) + " " + past + "; the others were refused, each with its reason below."
}

// bulkBudgetText lists the typed budgets of a bulk Continue.
func bulkBudgetText(b BulkBudgets) string {
	var parts []string
	for _, p := range [][2]string{{"iterations", b.MaxIterations}, {"minutes", b.MaxMinutes}, {"cost (USD)", b.MaxCostUSD}, {"tokens", b.MaxTokens}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	return strings.Join(parts, ", ")
}

func lower(s string) string { return strings.ToLower(s) }
