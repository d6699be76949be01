package handlers

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"

	"homework/views"
)

// effectData builds the effectiveness report of the reports page from the
// request's query: the selection, the figures and charts, the before/after
// comparison and, when asked, a what-if replay. Bad input is shown on the
// page (Error, WhatIfError), never a failure of the page. Its reads are
// made from r; the what-if replay, which the engine reads itself, is
// returned as whatIf (nil when not asked for), to run after r's
// transaction.
func (s *Server) effectData(c *fiber.Ctx, r spec.ReadStore) (d *views.EffectData, whatIf func()) {
	ctx := c.UserContext()
	u := userOf(c)
	q := func(k string) string { return strings.TrimSpace(c.Query(k)) }
	f := views.EffectForm{Since: q("since"), Until: q("until"), GroupBy: q("group_by"), Tag: q("tag"),
		Executor: q("executor"), Mode: q("mode"), Model: q("model"),
		ATag: q("a_tag"), ASince: q("a_since"), AUntil: q("a_until"), BTag: q("b_tag"), BSince: q("b_since"), BUntil: q("b_until"),
		WINoProgress: q("wi_no_progress"), WIRepeatedError: q("wi_repeated_error"), WIStallRepeats: q("wi_stall_repeats"),
		WIQuality: q("wi_quality"), WIMaxIterations: q("wi_max_iterations"), WIMaxMinutes: q("wi_max_minutes"),
		WIMaxCostUSD: q("wi_max_cost_usd"), WIMaxTokens: q("wi_max_tokens")}
	d = &views.EffectData{Form: f}
	fail := func(err error) *views.EffectData {
		if spec.ErrorCode(err) == spec.EINTERNAL {
			s.log.Error("reports page", "err", err)
		}
		d.Error = fieldMessage(err)
		return d
	}
	if tags, err := r.ListUserTags(ctx, u.ID); err == nil {
		d.Tags = tags
	}

	vals := map[string]string{"since": f.Since, "until": f.Until, "group_by": f.GroupBy, "tag": f.Tag,
		"executor": f.Executor, "mode": f.Mode, "model": f.Model}
	sel, err := pageSelection(vals)
	if err != nil {
		return fail(err), nil
	}
	sel.Filter.Detail = sel.GroupBy == spec.GroupByModel
	rows, err := r.StatsRows(ctx, u.ID, sel.Filter)
	if err != nil {
		return fail(err), nil
	}
	d.Figures = spec.Summarize(rows)
	d.GroupBy = sel.GroupBy
	if sel.GroupBy != "" {
		d.Groups = spec.SummarizeGroups(rows, sel.GroupBy)
	}
	d.Outcomes = views.OutcomesOverTime(rows)
	d.StopReasons = views.StopReasonChart(d.Figures)
	d.Iterations = views.IterationsHistogram(rows)
	d.Cost = views.CostHistogram(rows)
	d.ExportQuery = exportQuery(sel.Filter)

	if f.ATag != "" || f.ASince != "" || f.AUntil != "" || f.BTag != "" || f.BSince != "" || f.BUntil != "" {
		side := func(name, tag, since, until string) (spec.Figures, string, error) {
			v := map[string]string{"since": since, "until": until, "tag": tag, "executor": f.Executor, "mode": f.Mode, "model": f.Model}
			sq, err := pageSelection(v)
			if err != nil {
				return spec.Figures{}, "", spec.FieldError(name+"_"+spec.ErrorField(err), "%s: %s", name, spec.ErrorMessage(err))
			}
			rows, err := r.StatsRows(ctx, u.ID, sq.Filter)
			if err != nil {
				return spec.Figures{}, "", err
			}
			return spec.Summarize(rows), sideLabel(tag, since, until), nil
		}
		a, la, err := side("before", f.ATag, f.ASince, f.AUntil)
		if err != nil {
			return fail(err), nil
		}
		b, lb, err := side("after", f.BTag, f.BSince, f.BUntil)
		if err != nil {
			return fail(err), nil
		}
		d.Compare = &views.CompareData{ALabel: la, BLabel: lb, A: a, B: b, Chart: views.CompareChart(a, b, la, lb)}
	}

	if c.Query("whatif") != "" {
		whatIf = func() {
			rules, err := whatIfRulesFromForm(f)
			if err == nil {
				d.WhatIf, err = s.engine.WhatIf(ctx, u.ID, nil, sel.Filter, rules)
			}
			if err != nil {
				if spec.ErrorCode(err) == spec.EINTERNAL {
					s.log.Error("what-if", "err", err)
				}
				d.WhatIfError = fieldMessage(err)
			}
		}
	}
	return d, whatIf
}

// pageSelection parses the page's selection: dates (YYYY-MM-DD, the "to"
// date inclusive) or RFC 3339 times.
func pageSelection(vals map[string]string) (statsQuery, error) {
	for _, k := range []string{"since", "until"} {
		v := vals[k]
		if v == "" {
			continue
		}
		if day, err := time.Parse(time.DateOnly, v); err == nil {
			if k == "until" {
				day = day.AddDate(0, 0, 1)
			}
			vals[k] = day.Format(time.RFC3339)
		}
	}
	return parseStatsQuery(func(k string) string { return vals[k] }, nil)
}

func sideLabel(tag, since, until string) string {
	var parts []string
	if tag != "" {
		parts = append(parts, "tag "+tag)
	}
	if since != "" || until != "" {
		parts = append(parts, orText(since, "start")+" – "+orText(until, "now"))
	}
	if len(parts) == 0 {
		return "all runs"
	}
	return strings.Join(parts, ", ")
}

func orText(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// exportQuery is the selection as query parameters for the exports.
func exportQuery(f spec.StatsFilter) string {
	v := url.Values{}
	if !f.Since.IsZero() {
		v.Set("since", f.Since.Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		v.Set("until", f.Until.Format(time.RFC3339))
	}
	for k, x := range map[string]string{"executor": f.Executor, "mode": f.Mode, "model": f.Model, "tag": f.Tag} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "&" + v.Encode()
}

// whatIfRulesFromForm reads the what-if rules of the page's form.
func whatIfRulesFromForm(f views.EffectForm) (spec.WhatIfRules, error) {
	var r spec.WhatIfRules
	num := func(field, v string) (int64, error) {
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return 0, spec.FieldError(field, "Enter a whole number of at least 1, or leave it empty.")
		}
		return n, nil
	}
	var err error
	var n int64
	for _, x := range []struct {
		field, v string
		set      func(int64)
	}{
		{"breakers.no_progress", f.WINoProgress, func(n int64) { r.Breakers.NoProgress = int(min(n, 1000)) }},
		{"breakers.repeated_error", f.WIRepeatedError, func(n int64) { r.Breakers.RepeatedError = int(min(n, 1000)) }},
		{"breakers.stall_repeats", f.WIStallRepeats, func(n int64) { r.Breakers.StallRepeats = int(min(n, 1000)) }},
		{"budgets.max_iterations", f.WIMaxIterations, func(n int64) { r.Budgets.MaxIterations = int(min(n, 1_000_000)) }},
		{"budgets.max_running_ms", f.WIMaxMinutes, func(n int64) { r.Budgets.MaxRunningMS = min(n, 1<<31) * 60_000 }},
		{"budgets.max_total_tokens", f.WIMaxTokens, func(n int64) { r.Budgets.MaxTotalTokens = n }},
	} {
		if n, err = num(x.field, x.v); err != nil {
			return r, err
		}
		x.set(n)
	}
	if f.WIMaxCostUSD != "" {
		v, err := strconv.ParseFloat(f.WIMaxCostUSD, 64)
		if err != nil || v <= 0 {
			return r, spec.FieldError("budgets.max_cost_usd", "Enter an amount above 0, or leave it empty.")
		}
		r.Budgets.MaxCostUSD = v
	}
	switch f.WIQuality {
	case "":
	case "on", "off":
		on := f.WIQuality == "on"
		r.Breakers.QualityRegression = &on
	default:
		return r, spec.FieldError("breakers.quality_regression", "Choose on or off.")
	}
	return r, r.Validate()
}

// fieldMessage is an error as the page shows it: the field, then the
// message; internal errors say only that something failed.
func fieldMessage(err error) string {
	if spec.ErrorCode(err) == spec.EINTERNAL {
		return "The report could not be computed; try again."
	}
	if f := spec.ErrorField(err); f != "" {
		return f + ": " + spec.ErrorMessage(err)
	}
	return spec.ErrorMessage(err)
}
