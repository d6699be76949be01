package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"

	"homework/engine/spec"
	"homework/engine/text"
)

const tailUsage = `usage: homework tail RUN_ID [--since N] [--server URL] [--token T]

Follows a run's events and prints one line per event. It reconnects after a
dropped connection, resuming after the last event seen, and exits 0 when the
run completes, is canceled or fails. A stopped or waiting run is not over (it
can be continued or answered), so tail keeps following it; stop with Ctrl-C.

  --server  the server's base URL (env HOMEWORK_SERVER; default http://127.0.0.1:8080)
  --token   an API token from "homework token create" (env HOMEWORK_TOKEN)
  --since   start after this event seq (default 0: the whole history)`

// errRunFinished is how the stream's 204 answer (a finished run with
// nothing after the cursor) leaves the SSE client.
var errRunFinished = errors.New("run finished")

// tail follows a run's events; see tailUsage.
func tail(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tail")
	since := fs.Int64("since", 0, "start after this event seq")
	server := fs.String("server", orDefault(getenv(env, "HOMEWORK_SERVER"), "http://127.0.0.1:8080"), "server base URL (env HOMEWORK_SERVER)")
	token := fs.String("token", getenv(env, "HOMEWORK_TOKEN"), "API token (env HOMEWORK_TOKEN)")
	// The run id may come before or after the flags.
	var runID string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		runID, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		var hs *helpShown
		if errors.As(err, &hs) {
			return &helpShown{tailUsage + "\n"}
		}
		return err
	}
	if runID == "" && fs.NArg() > 0 {
		runID = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usagef("tail: unexpected argument %q (usage: homework tail RUN_ID [--since N] [--server URL] [--token T])", fs.Arg(0))
	}
	switch {
	case runID == "":
		return usagef("tail: missing RUN_ID (usage: homework tail RUN_ID [--since N] [--server URL] [--token T])")
	case *since < 0:
		return usagef("tail: --since must not be negative")
	case *token == "":
		return usagef("tail: no API token: pass --token or set HOMEWORK_TOKEN (create one with `homework token create`)")
	}
	base := strings.TrimRight(*server, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("tail: --server must be an http:// or https:// URL, got %q", *server)
	}
	t := &tailer{base: base, runID: runID, token: *token, out: stdout, http: &http.Client{Timeout: 30 * time.Second}}
	return t.follow(ctx, *since)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// tailer follows one run.
type tailer struct {
	base, runID, token string
	out                io.Writer
	http               *http.Client

	lastSeq int64
	// cost and tokens are the run's totals as of the last printed event;
	// known is false until an event has said what they are (following from
	// --since N, the totals at event N are not known).
	cost     float64
	tokens   int64
	known    bool
	terminal spec.EventType // the terminal event type, once seen
}

// tailRun is the part of GET /api/runs/{id} tail shows.
type tailRun struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Objective  string `json:"objective"`
	Iteration  int    `json:"iteration"`
	StopReason *struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
	} `json:"stop_reason"`
	Metrics struct {
		TokensTotal  int64   `json:"tokens_total"`
		CostTotalUSD float64 `json:"cost_total_usd"`
	} `json:"metrics"`
}

// getRun fetches the run, turning 401 and 404 into clear errors.
func (t *tailer) getRun(ctx context.Context) (*tailRun, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", t.base+"/api/runs/"+url.PathEscape(t.runID), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.token)
	req.Header.Set("Accept", "application/json")
	resp, err := t.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the server at %s: %w", t.base, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := statusError(resp.StatusCode, t.runID, body); err != nil {
		return nil, err
	}
	var r tailRun
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("unexpected answer from %s: %w", t.base, err)
	}
	return &r, nil
}

// statusError explains a non-200 answer, or returns nil for 200.
func statusError(status int, runID string, body []byte) error {
	var eb struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(body, &eb)
	switch status {
	case http.StatusOK:
		return nil
	case http.StatusUnauthorized:
		return fmt.Errorf("the server refused the token (401 Unauthorized); check --token or HOMEWORK_TOKEN")
	case http.StatusNotFound:
		return fmt.Errorf("run %s not found (404): it does not exist or is not yours", runID)
	}
	if eb.Error.Message != "" {
		return fmt.Errorf("server answered %d: %s", status, eb.Error.Message)
	}
	return fmt.Errorf("server answered %d %s", status, http.StatusText(status))
}

// follow streams the run's events until its terminal event (nil), ctx ends
// (ctx's error) or the server refuses the stream.
func (t *tailer) follow(ctx context.Context, since int64) error {
	run, err := t.getRun(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(t.out, "following run %s (%s, iteration %d): %s\n", run.ID, run.Status, run.Iteration, oneLine(run.Objective, 100))
	// Totals run along with the events printed: from the start they begin
	// at zero, not at the run's present (possibly final) totals.
	t.known = since == 0

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := sse.NewClient(t.base+"/api/runs/"+url.PathEscape(t.runID)+"/events", sse.ClientMaxBufferSize(1<<20))
	client.Headers["Authorization"] = "Bearer " + t.token
	if since > 0 {
		// The client sends Last-Event-ID on every (re)connect from here on.
		client.LastEventID.Store([]byte(strconv.FormatInt(since, 10)))
		t.lastSeq = since
	}
	// Reconnect forever (the default gives up after 15 minutes), and stop
	// waiting between attempts when ctx ends.
	client.ReconnectStrategy = backoff.WithContext(&backoff.ExponentialBackOff{
		InitialInterval: 250 * time.Millisecond, RandomizationFactor: 0.5, Multiplier: 2,
		MaxInterval: 5 * time.Second, MaxElapsedTime: 0, Clock: backoff.SystemClock,
	}, ctx)
	client.ResponseValidator = func(c *sse.Client, resp *http.Response) error {
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusNoContent:
			return backoff.Permanent(errRunFinished)
		case resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
			return backoff.Permanent(statusError(resp.StatusCode, t.runID, body))
		}
		return statusError(resp.StatusCode, t.runID, body) // retried
	}

	for {
		err := client.SubscribeWithContext(ctx, "", func(e *sse.Event) {
			if len(e.Data) == 0 || t.terminal != "" {
				return // a heartbeat, or the end was seen already
			}
			t.print(e)
			if t.terminal != "" {
				cancel()
			}
		})
		switch {
		case t.terminal != "":
			return nil
		case errors.Is(err, errRunFinished):
			return t.finished(context.WithoutCancel(ctx))
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return err
		}
		// A clean end of stream without the terminal event (such as a
		// server restart): the client does not reconnect by itself.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// finished reports a run that was over with nothing more to send.
func (t *tailer) finished(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	run, err := t.getRun(ctx)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("run %s is %s", run.ID, run.Status)
	if run.StopReason != nil && run.StopReason.Type != "" {
		line += fmt.Sprintf(" (%s: %s)", run.StopReason.Type, oneLine(run.StopReason.Detail, 200))
	}
	fmt.Fprintf(t.out, "%s; %d iterations, %d tokens, $%.4f; no more events\n", line, run.Iteration, run.Metrics.TokensTotal, run.Metrics.CostTotalUSD)
	return nil
}

// tailEvent is the SSE data of one event.
type tailEvent struct {
	Seq       int64           `json:"seq"`
	Type      spec.EventType  `json:"type"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// tailData is the union of the event data fields tail shows, decoded once
// per event; a field an event does not carry stays zero.
type tailData struct {
	Iteration  int      `json:"iteration"`
	Decision   string   `json:"decision"`
	Reasons    []string `json:"reasons"`
	Status     string   `json:"status"`
	Summary    string   `json:"summary"`
	Error      string   `json:"error"`
	Reason     string   `json:"reason"`
	Questions  []string `json:"questions"`
	Tool       string   `json:"tool"`
	Path       string   `json:"path"`
	Title      string   `json:"title"`
	Model      string   `json:"model"`
	Body       string   `json:"body"`
	Text       string   `json:"text"`
	Truncated  bool     `json:"truncated"`
	ExitCode   *int     `json:"exit_code"`
	TimedOut   bool     `json:"timed_out"`
	Role       string   `json:"role"`
	CostUSD    float64  `json:"cost_usd"`
	Prompt     int64    `json:"prompt_tokens"`
	Completion int64    `json:"completion_tokens"`
	StopReason *struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
	} `json:"stop_reason"`
	CostTotal   *float64     `json:"cost_total_usd"`
	TokensTotal *int64       `json:"tokens_total"`
	RunMetrics  *tailMetrics `json:"run_metrics"`
	Metrics     *tailMetrics `json:"metrics"` // run status events: the run's totals
	Check       *struct {
		Name    string `json:"name"`
		Passed  bool   `json:"passed"`
		Message string `json:"message"`
	} `json:"check"`
}

// tailMetrics is the part of a metrics object tail shows.
type tailMetrics struct {
	TokensTotal  int64   `json:"tokens_total"`
	CostTotalUSD float64 `json:"cost_total_usd"`
}

// print writes one readable line for e.
func (t *tailer) print(raw *sse.Event) {
	var e tailEvent
	if err := json.Unmarshal(raw.Data, &e); err != nil {
		fmt.Fprintf(t.out, "?? unreadable event %s: %v\n", raw.ID, err)
		return
	}
	if e.Seq != 0 && e.Seq <= t.lastSeq {
		return // already shown before a reconnect
	}
	t.lastSeq = e.Seq
	var d tailData
	json.Unmarshal(e.Data, &d)
	t.track(e.Type, &d)
	t.write(&e, t.detail(e.Type, &d), d.Text)
	switch e.Type {
	case spec.EventRunCompleted, spec.EventRunCanceled, spec.EventRunFailed:
		t.terminal = e.Type
	}
}

// track keeps the run's cumulative totals, where an event carries them.
func (t *tailer) track(typ spec.EventType, d *tailData) {
	switch {
	case d.CostTotal != nil && d.TokensTotal != nil:
		t.cost, t.tokens, t.known = *d.CostTotal, *d.TokensTotal, true
	case d.RunMetrics != nil:
		t.cost, t.tokens, t.known = d.RunMetrics.CostTotalUSD, d.RunMetrics.TokensTotal, true
	case d.Metrics != nil && strings.HasPrefix(string(typ), "run_"):
		t.cost, t.tokens, t.known = d.Metrics.CostTotalUSD, d.Metrics.TokensTotal, true
	}
}

// costSoFar describes the run's totals as of the last tracked event.
func (t *tailer) costSoFar() string {
	if !t.known {
		return "cost so far unknown (following from the middle)"
	}
	return fmt.Sprintf("cost so far $%.4f, %d tokens", t.cost, t.tokens)
}

// detail returns what the line of an event of type typ says after the
// type, "" for nothing.
func (t *tailer) detail(typ spec.EventType, d *tailData) string {
	if strings.HasPrefix(string(typ), "run_") && d.Status != "" {
		return runStatusDetail(d) + "; " + t.costSoFar()
	}
	switch typ {
	case spec.EventIterationStarted:
		return fmt.Sprintf("iteration %d", d.Iteration)
	case spec.EventIterationCompleted:
		detail := fmt.Sprintf("iteration %d %s, decision %s: %s", d.Iteration, d.Status, d.Decision, oneLine(d.Summary, 120))
		if d.Error != "" {
			detail += " (error: " + oneLine(d.Error, 120) + ")"
		}
		return detail + "; " + t.costSoFar()
	case spec.EventGateDecision:
		return fmt.Sprintf("iteration %d decision %s: %s; %s", d.Iteration, d.Decision, oneLine(strings.Join(d.Reasons, "; "), 200), t.costSoFar())
	case spec.EventIterationCostUpdate:
		return t.costSoFar()
	case spec.EventLLMCall:
		detail := fmt.Sprintf("%s model %s: %d+%d tokens, $%.4f", d.Role, d.Model, d.Prompt, d.Completion, d.CostUSD)
		if d.Error != "" {
			detail += "; FAILED: " + oneLine(d.Error, 300)
		}
		return detail
	case spec.EventAgentOutput:
		if d.Truncated {
			return fmt.Sprintf("iteration %d (output cap reached; the rest is not streamed)", d.Iteration)
		}
		return fmt.Sprintf("iteration %d", d.Iteration)
	case spec.EventAgentExit:
		return agentExitDetail(d)
	case spec.EventCheckResult:
		return checkDetail(d)
	case spec.EventRunWaitingOnUser:
		detail := "waiting for you (" + d.Reason + ")"
		if len(d.Questions) > 0 {
			detail += ": " + oneLine(strings.Join(d.Questions, " / "), 200)
		}
		return detail
	case spec.EventToolCall, spec.EventToolResult:
		return d.Tool
	case spec.EventDocumentCreated, spec.EventDocumentUpdated:
		return d.Path
	case spec.EventTaskUpdated:
		return fmt.Sprintf("%s: %s", d.Title, d.Status)
	case spec.EventMessageQueued:
		return oneLine(d.Body, 120)
	}
	return ""
}

// runStatusDetail describes a run status event: the status and the stop
// reason, if any.
func runStatusDetail(d *tailData) string {
	detail := "status " + d.Status
	if d.StopReason != nil && d.StopReason.Type != "" {
		detail += fmt.Sprintf(" (%s: %s)", d.StopReason.Type, oneLine(d.StopReason.Detail, 200))
	}
	return detail
}

// agentExitDetail describes how an agent process ended.
func agentExitDetail(d *tailData) string {
	switch {
	case d.TimedOut:
		return "timed out"
	case d.ExitCode != nil:
		return fmt.Sprintf("exit code %d", *d.ExitCode)
	}
	return ""
}

// checkDetail describes a check's result.
func checkDetail(d *tailData) string {
	if d.Check == nil {
		return ""
	}
	verdict := "failed"
	if d.Check.Passed {
		verdict = "passed"
	}
	return fmt.Sprintf("check %q %s: %s", d.Check.Name, verdict, oneLine(d.Check.Message, 120))
}

// write prints e's line with detail and, for agent output, the agent's
// text, one indented line each.
func (t *tailer) write(e *tailEvent, detail, text string) {
	ts := e.CreatedAt.Local().Format("15:04:05")
	// Event data carries text the agent wrote (paths, titles, tool names):
	// never let it send escape sequences to the terminal.
	typ, detail := printable(string(e.Type)), printable(detail)
	if detail != "" {
		fmt.Fprintf(t.out, "%s #%-4d %-22s %s\n", ts, e.Seq, typ, detail)
	} else {
		fmt.Fprintf(t.out, "%s #%-4d %s\n", ts, e.Seq, typ)
	}
	if e.Type == spec.EventAgentOutput {
		for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			fmt.Fprintf(t.out, "    │ %s\n", printable(strings.TrimRight(line, "\r")))
		}
	}
}

// oneLine shortens s to about n bytes on one line, without control
// characters.
func oneLine(s string, n int) string { return printable(text.OneLine(s, n)) }

// printable replaces control characters (escape sequences, line breaks) in s
// with '?', so that text from the server cannot drive the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}
