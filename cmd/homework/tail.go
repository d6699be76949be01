package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"homework/internal/text"
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
	server := fs.String("server", cmp.Or(getenv(env, "HOMEWORK_SERVER"), "http://127.0.0.1:8080"), "server base URL (env HOMEWORK_SERVER)")
	token := fs.String("token", getenv(env, "HOMEWORK_TOKEN"), "API token (env HOMEWORK_TOKEN)")
	// The run id may come before or after the flags.
	var runID string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		runID, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, tailUsage)
		}
		return err
	}
	if runID == "" && fs.NArg() > 0 {
		runID = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usagef("tail: unexpected argument %q\n%s", fs.Arg(0), tailUsage)
	}
	switch {
	case runID == "":
		return usagef("tail: missing RUN_ID\n%s", tailUsage)
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

// tailer follows one run.
type tailer struct {
	base, runID, token string
	out                io.Writer
	http               *http.Client

	lastSeq  int64
	cost     float64
	tokens   int64
	terminal string // the terminal event type, once seen
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
	t.cost, t.tokens = run.Metrics.CostTotalUSD, run.Metrics.TokensTotal

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
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// tailData is the part of an event's data that tail shows.
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
	StopReason *struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
	} `json:"stop_reason"`
	CostTotal   *float64 `json:"cost_total_usd"`
	TokensTotal *int64   `json:"tokens_total"`
	RunMetrics  *struct {
		TokensTotal  int64   `json:"tokens_total"`
		CostTotalUSD float64 `json:"cost_total_usd"`
	} `json:"run_metrics"`
	Check *struct {
		Name    string `json:"name"`
		Passed  bool   `json:"passed"`
		Message string `json:"message"`
	} `json:"check"`
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
	t.track(&d)
	detail := t.detail(e.Type, &d)
	ts := e.CreatedAt.Local().Format("15:04:05")
	// Event data carries text the agent wrote (paths, titles, tool names):
	// never let it send escape sequences to the terminal.
	typ := printable(e.Type)
	if detail = printable(detail); detail != "" {
		fmt.Fprintf(t.out, "%s #%-4d %-22s %s\n", ts, e.Seq, typ, detail)
	} else {
		fmt.Fprintf(t.out, "%s #%-4d %s\n", ts, e.Seq, typ)
	}
	if spec.IsTerminalEvent(e.Type) {
		t.terminal = e.Type
	}
}

// track keeps the run's cost and token totals from events that carry them.
func (t *tailer) track(d *tailData) {
	if d.CostTotal != nil {
		t.cost = *d.CostTotal
	}
	if d.TokensTotal != nil {
		t.tokens = *d.TokensTotal
	}
	if d.RunMetrics != nil {
		t.cost, t.tokens = d.RunMetrics.CostTotalUSD, d.RunMetrics.TokensTotal
	}
}

// detail is the text shown after an event's type.
func (t *tailer) detail(typ string, d *tailData) string {
	costSoFar := fmt.Sprintf("cost so far $%.4f, %d tokens", t.cost, t.tokens)
	var detail string
	switch typ {
	case spec.EventIterationStarted:
		detail = fmt.Sprintf("iteration %d", d.Iteration)
	case spec.EventIterationCompleted:
		detail = fmt.Sprintf("iteration %d %s, decision %s: %s", d.Iteration, d.Status, d.Decision, oneLine(d.Summary, 120))
		if d.Error != "" {
			detail += " (error: " + oneLine(d.Error, 120) + ")"
		}
		detail += "; " + costSoFar
	case spec.EventGateDecision:
		detail = fmt.Sprintf("iteration %d decision %s: %s; %s", d.Iteration, d.Decision, oneLine(strings.Join(d.Reasons, "; "), 200), costSoFar)
	case spec.EventIterationCostUpdate, spec.EventLLMCall:
		if d.Model != "" {
			detail = "model " + d.Model + "; "
		}
		detail += costSoFar
	case spec.EventCheckResult:
		if d.Check != nil {
			verdict := "failed"
			if d.Check.Passed {
				verdict = "passed"
			}
			detail = fmt.Sprintf("check %q %s: %s", d.Check.Name, verdict, oneLine(d.Check.Message, 120))
		}
	case spec.EventRunWaitingOnUser:
		detail = "waiting for you (" + d.Reason + ")"
		if len(d.Questions) > 0 {
			detail += ": " + oneLine(strings.Join(d.Questions, " / "), 200)
		}
	case spec.EventToolCall, spec.EventToolResult:
		detail = d.Tool
	case spec.EventDocumentCreated, spec.EventDocumentUpdated:
		detail = d.Path
	case spec.EventTaskUpdated:
		detail = fmt.Sprintf("%s: %s", d.Title, d.Status)
	case spec.EventMessageQueued:
		detail = oneLine(d.Body, 120)
	}
	if strings.HasPrefix(typ, "run_") && d.Status != "" {
		detail = "status " + d.Status
		if d.StopReason != nil && d.StopReason.Type != "" {
			detail += fmt.Sprintf(" (%s: %s)", d.StopReason.Type, oneLine(d.StopReason.Detail, 200))
		}
		detail += "; " + costSoFar
	}
	return detail
}

// oneLine puts s on one line without control characters, cut to n bytes.
func oneLine(s string, n int) string {
	return text.Truncate(printable(text.Collapse(s)), n)
}

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
