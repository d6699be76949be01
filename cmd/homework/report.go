package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const reportUsage = `usage: homework report [--since T] [--until T] [--group-by G] [--tag T] [--executor X]
                       [--mode M] [--model M] [--format table|json|csv] [--server URL] [--token T]

Prints the effectiveness figures of your runs (GET /api/stats): completion,
false-completion and escalation rates, iterations and running time (p50/p95,
nearest rank), cost, tokens, tool calls and stop reasons.

  --since, --until  the window of run creation: RFC 3339 times or dates
                    (YYYY-MM-DD; --until's date is included); default all time
  --group-by        executor, model, mode, tag or week
  --format          table (default), json (the API's answer) or csv (one row per group)
  --server          the server's base URL (env HOMEWORK_SERVER; default http://127.0.0.1:8080)
  --token           an API token from "homework token create" (env HOMEWORK_TOKEN)`

// reportFigures is the part of GET /api/stats the terminal prints.
type reportFigures struct {
	Key                     string  `json:"key"`
	Runs                    int     `json:"runs"`
	Ended                   int     `json:"ended"`
	Completed               int     `json:"completed"`
	CompletionRate          float64 `json:"completion_rate"`
	CompletionClaims        int     `json:"completion_claims"`
	FalseCompletionsBlocked int     `json:"false_completions_blocked"`
	FalseCompletionRate     float64 `json:"false_completion_rate"`
	EscalationRate          float64 `json:"escalation_rate"`
	Iterations              struct {
		P50 float64 `json:"p50"`
		P95 float64 `json:"p95"`
	} `json:"iterations"`
	RunningMS struct {
		P50 float64 `json:"p50"`
		P95 float64 `json:"p95"`
	} `json:"running_ms"`
	CostUSD struct {
		Total           float64 `json:"total"`
		PerCompletedRun float64 `json:"per_completed_run"`
	} `json:"cost_usd"`
	TokensTotal int64 `json:"tokens_total"`
	ToolCalls   struct {
		Total  int     `json:"total"`
		PerRun float64 `json:"per_run"`
	} `json:"tool_calls"`
	BudgetOvershoot struct {
		CostUSD float64 `json:"cost_usd"`
		Tokens  int64   `json:"tokens"`
		Runs    int     `json:"runs"`
	} `json:"budget_overshoot"`
	StoppedByForecast int            `json:"stopped_by_forecast"`
	StopReasons       map[string]int `json:"stop_reasons"`
}

type reportAnswer struct {
	reportFigures
	GroupBy string          `json:"group_by"`
	Groups  []reportFigures `json:"groups"`
}

// report prints the effectiveness figures; see reportUsage.
func report(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlagSet("report")
	since := fs.String("since", "", "start of the window")
	until := fs.String("until", "", "end of the window")
	groupBy := fs.String("group-by", "", "executor, model, mode, tag or week")
	tag := fs.String("tag", "", "only runs with this tag")
	executor := fs.String("executor", "", "only runs of this executor")
	mode := fs.String("mode", "", "only runs of this mode")
	model := fs.String("model", "", "only runs configured with this model")
	format := fs.String("format", "table", "table, json or csv")
	server := fs.String("server", orDefault(getenv(env, "HOMEWORK_SERVER"), "http://127.0.0.1:8080"), "server base URL (env HOMEWORK_SERVER)")
	token := fs.String("token", getenv(env, "HOMEWORK_TOKEN"), "API token (env HOMEWORK_TOKEN)")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, reportUsage)
		}
		return err
	}
	if fs.NArg() > 0 {
		return usagef("report: unexpected argument %q\n%s", fs.Arg(0), reportUsage)
	}
	if *format != "table" && *format != "json" && *format != "csv" {
		return usagef("report: --format must be table, json or csv")
	}
	if *token == "" {
		return usagef("report: no API token: pass --token or set HOMEWORK_TOKEN (create one with `homework token create`)")
	}
	base := strings.TrimRight(*server, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("report: --server must be an http:// or https:// URL, got %q", *server)
	}
	q := url.Values{}
	for name, v := range map[string]string{"since": *since, "until": *until} {
		if v == "" {
			continue
		}
		if day, err := time.Parse(time.DateOnly, v); err == nil {
			if name == "until" {
				day = day.AddDate(0, 0, 1)
			}
			v = day.Format(time.RFC3339)
		}
		q.Set(name, v)
	}
	for name, v := range map[string]string{"group_by": *groupBy, "tag": *tag, "executor": *executor, "mode": *mode, "model": *model} {
		if v != "" {
			q.Set(name, v)
		}
	}
	body, err := apiGet(ctx, base+"/api/stats?"+q.Encode(), *token)
	if err != nil {
		return err
	}
	if *format == "json" {
		_, err := stdout.Write(append(body, '\n'))
		return err
	}
	var ans reportAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return fmt.Errorf("report: the server's answer is not the expected JSON: %w", err)
	}
	rows := []reportFigures{ans.reportFigures}
	rows[0].Key = "all"
	for _, g := range ans.Groups {
		if g.Key == "" {
			g.Key = "(none)"
		}
		rows = append(rows, g)
	}
	if *format == "csv" {
		return reportCSV(stdout, ans.GroupBy, rows)
	}
	return reportTable(stdout, ans.GroupBy, rows)
}

// apiGet fetches path with the token and returns the body of a 200 answer;
// an API error becomes an error with its message and field.
func apiGet(ctx context.Context, u, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("report: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Message string `json:"message"`
				Field   string `json:"field"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			if e.Error.Field != "" {
				return nil, fmt.Errorf("report: %s (%s)", e.Error.Message, e.Error.Field)
			}
			return nil, fmt.Errorf("report: %s", e.Error.Message)
		}
		return nil, fmt.Errorf("report: the server answered %s", resp.Status)
	}
	return body, nil
}

var reportColumns = []string{"runs", "ended", "completed", "completion_rate", "completion_claims", "false_completions_blocked",
	"false_completion_rate", "escalation_rate", "iterations_p50", "iterations_p95", "running_ms_p50", "running_ms_p95",
	"cost_usd_total", "cost_usd_per_completed_run", "tokens_total", "tool_calls_total", "tool_calls_per_run",
	"budget_overshoot_usd", "budget_overshoot_tokens", "budget_overshoot_runs", "stopped_by_forecast", "stop_reasons"}

func (f reportFigures) cells(pct func(float64) string) []string {
	n := strconv.Itoa
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return []string{n(f.Runs), n(f.Ended), n(f.Completed), pct(f.CompletionRate), n(f.CompletionClaims),
		n(f.FalseCompletionsBlocked), pct(f.FalseCompletionRate), pct(f.EscalationRate), num(f.Iterations.P50),
		num(f.Iterations.P95), num(f.RunningMS.P50), num(f.RunningMS.P95), strconv.FormatFloat(f.CostUSD.Total, 'f', 4, 64),
		strconv.FormatFloat(f.CostUSD.PerCompletedRun, 'f', 4, 64), strconv.FormatInt(f.TokensTotal, 10), n(f.ToolCalls.Total),
		strconv.FormatFloat(f.ToolCalls.PerRun, 'f', 2, 64), strconv.FormatFloat(f.BudgetOvershoot.CostUSD, 'f', 4, 64),
		strconv.FormatInt(f.BudgetOvershoot.Tokens, 10), n(f.BudgetOvershoot.Runs), n(f.StoppedByForecast), stopReasons(f.StopReasons)}
}

func stopReasons(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Most frequent first, then by name.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && (m[keys[j]] > m[keys[j-1]] || m[keys[j]] == m[keys[j-1]] && keys[j] < keys[j-1]); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func reportCSV(w io.Writer, groupBy string, rows []reportFigures) error {
	cw := csv.NewWriter(w)
	cw.Write(append([]string{orDefault(groupBy, "group")}, reportColumns...))
	for _, r := range rows {
		cw.Write(append([]string{r.Key}, r.cells(func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) })...))
	}
	cw.Flush()
	return cw.Error()
}

// reportTable prints one column per group (the figures as rows), which
// stays narrow enough for a terminal whatever the number of figures.
func reportTable(w io.Writer, groupBy string, rows []reportFigures) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{orDefault(groupBy, "")}
	cols := make([][]string, len(rows))
	for i, r := range rows {
		head = append(head, r.Key)
		cols[i] = r.cells(func(v float64) string { return strconv.FormatFloat(v*100, 'f', 1, 64) + "%" })
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for j, name := range reportColumns {
		line := []string{name}
		for i := range rows {
			line = append(line, cols[i][j])
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	return tw.Flush()
}
