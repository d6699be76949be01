package handlers

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"homework/db"
	"homework/views"
)

// runFilterQuery reads the run list's filters from the query string, the
// same for the page and GET /api/runs:
//
//	q          free text over objectives and documents
//	status     a run status
//	executor   llm, command, script, …
//	stop       a stop reason type, such as max_iterations
//	from, to   creation dates YYYY-MM-DD, both inclusive (UTC)
//	sort       newest (default), oldest, cost, cost_asc
//	cursor     from the previous page, with the same filters
//
// A bad value is EINVALID on its parameter.
func runFilterQuery(c *fiber.Ctx) (views.RunListFilter, db.RunFilter, error) {
	v := views.RunListFilter{
		Query:    strings.TrimSpace(c.Query("q")),
		Status:   c.Query("status"),
		Executor: strings.TrimSpace(c.Query("executor")),
		StopType: strings.TrimSpace(c.Query("stop")),
		From:     strings.TrimSpace(c.Query("from")),
		To:       strings.TrimSpace(c.Query("to")),
		Sort:     c.Query("sort"),
	}
	if v.Sort == db.SortNewest {
		v.Sort = "" // the default, so that links stay short
	}
	f := db.RunFilter{Query: v.Query, Status: v.Status, Executor: v.Executor, StopType: v.StopType, Sort: v.Sort, Cursor: c.Query("cursor")}
	switch {
	case v.Status != "" && !slices.Contains(db.Statuses, v.Status):
		return v, f, db.FieldError("status", "Unknown status %q; use one of %s.", v.Status, strings.Join(db.Statuses, ", "))
	case v.Sort != "" && !slices.Contains(db.RunSorts, v.Sort):
		return v, f, db.FieldError("sort", "Unknown sort %q; use one of %s.", v.Sort, strings.Join(db.RunSorts, ", "))
	case utf8.RuneCountInString(v.Query) > 200 || !utf8.ValidString(v.Query):
		return v, f, db.FieldError("q", "The search text must be at most 200 characters.")
	case len(v.Executor) > 40 || len(v.StopType) > 40:
		return v, f, db.FieldError("executor", "Unknown executor or stop reason.")
	}
	for _, d := range []struct {
		name, value string
		into        *time.Time
		after       time.Duration
	}{{"from", v.From, &f.CreatedFrom, 0}, {"to", v.To, &f.CreatedBefore, 24 * time.Hour}} {
		if d.value == "" {
			continue
		}
		t, err := time.Parse(time.DateOnly, d.value)
		if err != nil {
			return v, f, db.FieldError(d.name, "%q is not a date; use YYYY-MM-DD.", d.value)
		}
		*d.into = t.Add(d.after)
	}
	return v, f, nil
}
