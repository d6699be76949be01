package handlers

import (
	"slices"
	"strings"
	"time"

	"homework/engine"
	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"

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
func runFilterQuery(c *fiber.Ctx) (views.RunListFilter, spec.RunFilter, error) {
	v := views.RunListFilter{
		Query:    strings.TrimSpace(c.Query("q")),
		Status:   c.Query("status"),
		Executor: strings.TrimSpace(c.Query("executor")),
		StopType: strings.TrimSpace(c.Query("stop")),
		From:     strings.TrimSpace(c.Query("from")),
		To:       strings.TrimSpace(c.Query("to")),
		Sort:     c.Query("sort"),
		Tag:      strings.TrimSpace(c.Query("tag")),
	}
	if v.Sort == spec.SortNewest {
		v.Sort = "" // the default, so that links stay short
	}
	f := spec.RunFilter{Query: v.Query, Status: v.Status, Executor: v.Executor, StopType: v.StopType, Sort: v.Sort, Cursor: c.Query("cursor")}
	if v.Tag != "" {
		tag, err := engine.NormalizeTag("tag", v.Tag)
		if err != nil {
			return v, f, err
		}
		v.Tag, f.Tag = tag, tag
	}
	switch {
	case v.Status != "" && !slices.Contains(spec.Statuses, v.Status):
		return v, f, spec.FieldError("status", "Unknown status %q; use one of %s.", v.Status, strings.Join(spec.Statuses, ", "))
	case v.Sort != "" && !slices.Contains(spec.RunSorts, v.Sort):
		return v, f, spec.FieldError("sort", "Unknown sort %q; use one of %s.", v.Sort, strings.Join(spec.RunSorts, ", "))
	case v.Query != "" && searchText("q", v.Query, 200) != nil:
		return v, f, searchText("q", v.Query, 200)
	case len(v.Executor) > 40 || len(v.StopType) > 40:
		return v, f, spec.FieldError("executor", "Unknown executor or stop reason.")
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
			return v, f, spec.FieldError(d.name, "%q is not a date; use YYYY-MM-DD.", d.value)
		}
		*d.into = t.Add(d.after)
	}
	return v, f, nil
}
