package handlers

import (
	"bytes"
	"encoding/csv"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"homework/engine"
	"homework/engine/spec"
)

// statsRoutes registers the effectiveness report's API: the figures, the
// per-run rows behind them, and the what-if replay.
func (s *Server) statsRoutes(api fiber.Router) {
	api.Get("/stats", s.apiStats)
	api.Get("/stats/runs", s.apiStatsRuns)
	api.Post("/whatif", s.apiWhatIf)
}

// StatsJSON is the answer of GET /api/stats: the figures over the selected
// runs and, with group_by, the same figures per group.
type StatsJSON struct {
	Since   *time.Time        `json:"since"`
	Until   *time.Time        `json:"until"`
	Filters map[string]string `json:"filters"`
	GroupBy string            `json:"group_by,omitempty"`
	spec.Figures
	Groups           []spec.StatsGroup `json:"groups,omitempty"`
	PercentileMethod string            `json:"percentile_method"`
}

// StatsRowsJSON is the JSON export of GET /api/stats/runs.
type StatsRowsJSON struct {
	Runs []spec.StatsRow `json:"runs"`
}

// statsQuery is a parsed report selection.
type statsQuery struct {
	Filter  spec.StatsFilter
	GroupBy string
}

// statsParams are the query parameters of a report selection.
var statsParams = []string{"since", "until", "executor", "model", "mode", "tag", "group_by"}

// parseStatsQuery reads a report selection from get (a query or form
// lookup). extra names further parameters the caller reads itself; any other
// non-empty parameter in names is refused so that a typo is not silently
// ignored. Problems are EINVALID with the parameter as the field.
func parseStatsQuery(get func(string) string, names []string, extra ...string) (statsQuery, error) {
	var q statsQuery
	for _, n := range names {
		if !containsStr(statsParams, n) && !containsStr(extra, n) {
			return q, spec.FieldError(n, "Unknown parameter %q; use %s.", n, strings.Join(append(append([]string{}, statsParams...), extra...), ", "))
		}
	}
	parseTime := func(name string) (time.Time, error) {
		v := strings.TrimSpace(get(name))
		if v == "" {
			return time.Time{}, nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return time.Time{}, spec.FieldError(name, "%s must be an RFC 3339 time such as 2026-11-01T00:00:00Z.", name)
		}
		return t.UTC(), nil
	}
	var err error
	if q.Filter.Since, err = parseTime("since"); err != nil {
		return q, err
	}
	if q.Filter.Until, err = parseTime("until"); err != nil {
		return q, err
	}
	if !q.Filter.Since.IsZero() && !q.Filter.Until.IsZero() && !q.Filter.Until.After(q.Filter.Since) {
		return q, spec.FieldError("until", "until must be after since.")
	}
	switch ex := get("executor"); ex {
	case "", spec.ExecutorLLM, spec.ExecutorCommand, spec.ExecutorScript:
		q.Filter.Executor = ex
	default:
		return q, spec.FieldError("executor", "executor must be llm, command or script.")
	}
	switch m := get("mode"); m {
	case "", spec.ModeAuto, spec.ModeInteractive:
		q.Filter.Mode = m
	default:
		return q, spec.FieldError("mode", "mode must be auto or interactive.")
	}
	if m := get("model"); m != "" {
		if len(m) > 200 || strings.ContainsFunc(m, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return q, spec.FieldError("model", "model must be a model name of at most 200 characters.")
		}
		q.Filter.Model = m
	}
	if t := get("tag"); t != "" {
		if q.Filter.Tag, err = engine.NormalizeTag("tag", t); err != nil {
			return q, err
		}
	}
	if g := get("group_by"); g != "" {
		if !containsStr(spec.GroupBys, g) {
			return q, spec.FieldError("group_by", "group_by must be one of %s.", strings.Join(spec.GroupBys, ", "))
		}
		q.GroupBy = g
	}
	return q, nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// queryNames returns the names of the request's query parameters.
func queryNames(c *fiber.Ctx) []string {
	var names []string
	c.Context().QueryArgs().VisitAll(func(k, _ []byte) { names = append(names, string(k)) })
	return names
}

// statsJSON computes the report for q over rows.
func statsJSON(q statsQuery, rows []spec.StatsRow) StatsJSON {
	out := StatsJSON{Since: timeOrNil(q.Filter.Since), Until: timeOrNil(q.Filter.Until), GroupBy: q.GroupBy,
		Filters: map[string]string{}, Figures: spec.Summarize(rows), PercentileMethod: spec.PercentileMethod}
	for k, v := range map[string]string{"executor": q.Filter.Executor, "model": q.Filter.Model, "mode": q.Filter.Mode, "tag": q.Filter.Tag} {
		if v != "" {
			out.Filters[k] = v
		}
	}
	if q.GroupBy != "" {
		out.Groups = spec.SummarizeGroups(rows, q.GroupBy)
	}
	return out
}

// apiStats handles GET /api/stats?since=&until=&executor=&model=&mode=&tag=&group_by=:
// the effectiveness figures over the caller's runs created in the window.
func (s *Server) apiStats(c *fiber.Ctx) error {
	q, err := parseStatsQuery(queryGetter(c), queryNames(c))
	if err != nil {
		return s.jsonError(c, err)
	}
	q.Filter.Detail = q.GroupBy == spec.GroupByModel
	rows, err := s.db.StatsRows(c.UserContext(), userOf(c).ID, q.Filter)
	if err != nil {
		return s.jsonError(c, err)
	}
	return c.JSON(statsJSON(q, rows))
}

// apiStatsRuns handles GET /api/stats/runs?…&format=json|csv: the per-run
// rows behind the figures, oldest first.
func (s *Server) apiStatsRuns(c *fiber.Ctx) error {
	q, err := parseStatsQuery(queryGetter(c), queryNames(c), "format")
	if err != nil {
		return s.jsonError(c, err)
	}
	format := c.Query("format", "json")
	if format != "json" && format != "csv" {
		return s.jsonError(c, spec.FieldError("format", "format must be json or csv."))
	}
	q.Filter.Detail = true
	rows, err := s.db.StatsRows(c.UserContext(), userOf(c).ID, q.Filter)
	if err != nil {
		return s.jsonError(c, err)
	}
	if format == "csv" {
		c.Set(fiber.HeaderContentType, "text/csv; charset=utf-8")
		c.Set(fiber.HeaderContentDisposition, `attachment; filename="homework-runs.csv"`)
		return c.Send(statsCSV(rows))
	}
	if rows == nil {
		rows = []spec.StatsRow{}
	}
	return c.JSON(StatsRowsJSON{Runs: rows})
}

// statsCSVHeader is the header row of the CSV export.
var statsCSVHeader = []string{"run_id", "created_at", "executor", "mode", "model", "tags", "status", "stop_reason",
	"iterations", "running_ms", "cost_usd", "tokens_total", "tool_calls", "false_completions_blocked", "escalated", "objective"}

// statsCSV renders rows as CSV. Cells that a spreadsheet would read as a
// formula are prefixed with a quote.
func statsCSV(rows []spec.StatsRow) []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	w.Write(statsCSVHeader)
	for _, r := range rows {
		w.Write([]string{r.RunID, r.CreatedAt.UTC().Format(time.RFC3339), r.Executor, r.Mode, csvSafe(r.Model),
			strings.Join(r.Tags, " "), r.Status, r.StopReason, strconv.Itoa(r.Iterations),
			strconv.FormatInt(r.RunningMS, 10), strconv.FormatFloat(r.CostUSD, 'f', -1, 64),
			strconv.FormatInt(r.TokensTotal, 10), strconv.Itoa(r.ToolCalls), strconv.Itoa(r.FalseCompletionsBlocked),
			strconv.FormatBool(r.Escalated), csvSafe(r.Objective)})
	}
	w.Flush()
	return buf.Bytes()
}

func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// WhatIfRequest is the body of POST /api/whatif: the runs to replay (by id,
// or the report selection of GET /api/stats) and the alternative rules.
type WhatIfRequest struct {
	RunIDs   []string           `json:"run_ids"`
	Since    string             `json:"since"`
	Until    string             `json:"until"`
	Executor string             `json:"executor"`
	Model    string             `json:"model"`
	Mode     string             `json:"mode"`
	Tag      string             `json:"tag"`
	Budgets  spec.WhatIfBudgets `json:"budgets"`
	Breakers spec.Breakers      `json:"breakers"`
}

// selection returns the request's run selection.
func (r *WhatIfRequest) selection() (statsQuery, error) {
	vals := map[string]string{"since": r.Since, "until": r.Until, "executor": r.Executor, "model": r.Model, "mode": r.Mode, "tag": r.Tag}
	return parseStatsQuery(func(k string) string { return vals[k] }, nil)
}

// apiWhatIf handles POST /api/whatif: replays the rules over the selected
// runs' recorded iterations. It reads history only.
func (s *Server) apiWhatIf(c *fiber.Ctx) error {
	var req WhatIfRequest
	if err := decodeJSON(c, &req, false); err != nil {
		return s.jsonError(c, err)
	}
	q, err := req.selection()
	if err != nil {
		return s.jsonError(c, err)
	}
	res, err := s.engine.WhatIf(c.UserContext(), userOf(c).ID, req.RunIDs,
		q.Filter, spec.WhatIfRules{Budgets: req.Budgets, Breakers: req.Breakers})
	if err != nil {
		return s.jsonError(c, err)
	}
	return c.JSON(res)
}

func queryGetter(c *fiber.Ctx) func(string) string {
	return func(k string) string { return c.Query(k) }
}
