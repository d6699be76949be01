package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"code.dny.dev/ssrf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"homework/engine/spec"
)

// Webhooks deliver a run's outcome to its owner's endpoints. A status change
// (setStatus) inserts, in its own transaction, one delivery row and one
// River job of kind webhook per subscribed endpoint, so an outcome is never
// without its deliveries and never has them twice. The job POSTs the
// delivery's body signed by Standard Webhooks; a 2xx ends it. Anything else
// is recorded together with the next attempt's job, scheduled after a
// jittered backoff (or the receiver's Retry-After), until WebhookRetryFor
// has passed, after which the delivery is failed and its owner notified.
// The jobs are on the durable queue, so a restart (or a SIGKILL between
// attempts) only delays a delivery. (River makes a scheduled job available
// within its scheduler's interval, 5 s: about the first backoff.)

// webhookQueue is the River queue of webhook jobs, so that slow receivers
// never hold an iteration's worker.
const webhookQueue = "webhook"

// maxWebhookResponse is how much of a receiver's response body is read and
// stored.
const maxWebhookResponse = 64 << 10

// WebhookArgs are the args of a webhook job: the next attempt of one
// delivery, of one generation (a redelivery is a new generation), after
// Attempt attempts. A job that is not the delivery's current one (another
// attempt was recorded, or it was redelivered) completes as a no-op, so a
// job that resurfaces never posts twice. Since is when the generation's
// retry window began.
type WebhookArgs struct {
	DeliveryID int64     `json:"delivery_id" river:"unique"`
	Generation int       `json:"generation" river:"unique"`
	Attempt    int       `json:"attempt" river:"unique"`
	Since      time.Time `json:"since"`
}

// Kind implements river.JobArgs.
func (WebhookArgs) Kind() string { return "webhook" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (WebhookArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: webhookQueue, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type webhookWorker struct {
	river.WorkerDefaults[WebhookArgs]
	e *Engine
}

func (w *webhookWorker) Work(ctx context.Context, job *river.Job[WebhookArgs]) error {
	return w.e.deliver(ctx, job.Args)
}

// newWebhookCounter counts deliveries by outcome: delivered, retried (an
// attempt failed, another follows) and failed (given up).
func newWebhookCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "homework_webhook_deliveries_total",
		Help: "Webhook delivery attempts by outcome (delivered, retried, failed)."}, []string{"outcome"})
}

// newWebhookClient returns the client deliveries are posted with: no
// proxy, no redirects followed, and, unless private addresses are allowed,
// a dialer that refuses loopback, private, link-local and multicast
// addresses at connect time (after DNS resolution, so rebinding cannot get
// through).
func newWebhookClient(o Options) *http.Client {
	d := &net.Dialer{Timeout: o.WebhookTimeout}
	if !o.WebhookAllowPrivate {
		d.Control = ssrf.New(ssrf.WithAnyPort()).Safe
	}
	return &http.Client{
		Timeout: o.WebhookTimeout,
		Transport: &http.Transport{
			DialContext:           d.DialContext,
			TLSHandshakeTimeout:   o.WebhookTimeout,
			ResponseHeaderTimeout: o.WebhookTimeout,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CreateWebhook validates and stores a new endpoint of the user; its
// secret is in the result, shown once. The URL must be https (or http when
// WebhookAllowHTTP) and, unless WebhookAllowPrivate, its host must resolve
// only to public addresses: otherwise EINVALID with field url. events
// defaults to every run event, format to standard.
func (e *Engine) CreateWebhook(ctx context.Context, userID int64, rawURL string, events []string, format string) (*spec.WebhookEndpoint, error) {
	if err := e.checkWebhookURL(ctx, rawURL); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		events = spec.WebhookEvents
	}
	var evs []string
	for _, ev := range spec.WebhookEvents {
		if slices.Contains(events, ev) {
			evs = append(evs, ev)
		}
	}
	for _, ev := range events {
		if !slices.Contains(spec.WebhookEvents, ev) {
			return nil, spec.FieldError("events", "Unknown event %q; events are %s.", truncate(ev, 40), strings.Join(spec.WebhookEvents, ", "))
		}
	}
	switch format {
	case "":
		format = spec.WebhookFormatStandard
	case spec.WebhookFormatStandard, spec.WebhookFormatSlack:
	default:
		return nil, spec.FieldError("format", "The format is standard or slack.")
	}
	ep := &spec.WebhookEndpoint{UserID: userID, URL: rawURL, Events: evs, Format: format, Secret: spec.NewWebhookSecret()}
	if err := e.store.CreateWebhook(ctx, ep); err != nil {
		return nil, err
	}
	return ep, nil
}

func (e *Engine) checkWebhookURL(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || len(rawURL) > 2000 {
		return spec.FieldError("url", "The URL is not a valid absolute URL.")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && e.opts.WebhookAllowHTTP:
	default:
		return spec.FieldError("url", "The URL must be https.")
	}
	if e.opts.WebhookAllowPrivate {
		return nil
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		addrs, err = net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return spec.FieldError("url", "The URL's host does not resolve.")
		}
	}
	g := ssrf.New(ssrf.WithAnyPort())
	for _, a := range addrs {
		if err := g.SafeAddr(a.Unmap()); err != nil {
			return spec.FieldError("url", "The URL's host resolves to a loopback, private, link-local or multicast address (%s), which this server does not deliver to.", a)
		}
	}
	return nil
}

// TestWebhook sends a ping to one of the user's endpoints.
func (e *Engine) TestWebhook(ctx context.Context, userID, endpointID int64) (*spec.WebhookDelivery, error) {
	ep, err := e.store.FindWebhook(ctx, userID, endpointID)
	if err != nil {
		return nil, err
	}
	var d *spec.WebhookDelivery
	err = e.inTx(ctx, func(tx spec.Tx) error {
		body := e.webhookBody(ep, spec.WebhookPing, tx.Now(), nil, "")
		d, err = e.insertDelivery(ctx, tx, ep, spec.WebhookPing, "", body)
		return err
	})
	return d, err
}

// RedeliverWebhook sends one of the user's deliveries again, with the same
// webhook-id, as a new generation with a fresh retry window.
func (e *Engine) RedeliverWebhook(ctx context.Context, userID, endpointID, deliveryID int64) (*spec.WebhookDelivery, error) {
	var d *spec.WebhookDelivery
	err := e.inTx(ctx, func(tx spec.Tx) error {
		var err error
		if d, err = tx.FindUserWebhookDelivery(ctx, userID, endpointID, deliveryID); err != nil {
			return err
		}
		d.Generation++
		d.State, d.Attempts, d.NextAttemptAt = spec.DeliveryPending, 0, tx.Now()
		if err := tx.UpdateWebhookDelivery(ctx, d); err != nil {
			return err
		}
		_, err = e.queue.InsertJobTx(ctx, tx, WebhookArgs{DeliveryID: d.ID, Generation: d.Generation, Since: tx.Now()}, time.Time{})
		return err
	})
	return d, err
}

// enqueueWebhooks inserts, in tx, a delivery and its job for each of the
// run owner's endpoints subscribed to the new status's event.
func (e *Engine) enqueueWebhooks(ctx context.Context, tx spec.Tx, run *spec.Run, status string, wait *spec.Waiting) error {
	event := spec.WebhookEvent(status)
	// A run waiting for its host waits on a machine, not on the person.
	if event == "" || (wait != nil && wait.Reason == spec.WaitHostUnavailable) {
		return nil
	}
	eps, err := tx.WebhooksFor(ctx, run.UserID, event)
	if err != nil {
		return err
	}
	for _, ep := range eps {
		body := e.webhookBody(ep, event, tx.Now(), run, status)
		if _, err := e.insertDelivery(ctx, tx, ep, event, run.ID, body); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) insertDelivery(ctx context.Context, tx spec.Tx, ep *spec.WebhookEndpoint, event, runID string, body []byte) (*spec.WebhookDelivery, error) {
	d := &spec.WebhookDelivery{EndpointID: ep.ID, UserID: ep.UserID, RunID: runID, Event: event,
		WebhookID: spec.NewWebhookID(), Body: body, NextAttemptAt: tx.Now()}
	if err := tx.InsertWebhookDelivery(ctx, d); err != nil {
		return nil, err
	}
	_, err := e.queue.InsertJobTx(ctx, tx, WebhookArgs{DeliveryID: d.ID, Generation: d.Generation, Since: tx.Now()}, time.Time{})
	return d, err
}

// WebhookPayload is the body of a standard delivery.
type WebhookPayload struct {
	Type      string      `json:"type"`
	Timestamp string      `json:"timestamp"`
	Data      WebhookData `json:"data"`
}

// WebhookData is a standard delivery's data: the run and its outcome.
type WebhookData struct {
	RunID      string           `json:"run_id,omitempty"`
	Objective  string           `json:"objective,omitempty"`
	Status     string           `json:"status,omitempty"`
	StopReason *spec.StopReason `json:"stop_reason"`
	Waiting    *spec.Waiting    `json:"waiting"`
	URL        string           `json:"url"`
	Metrics    *WebhookMetrics  `json:"metrics,omitempty"`
}

// WebhookMetrics are a run's figures in a delivery.
type WebhookMetrics struct {
	Iterations  int     `json:"iterations"`
	RunningMS   int64   `json:"running_ms"`
	TokensTotal int64   `json:"tokens_total"`
	CostUSD     float64 `json:"cost_usd"`
	ToolCalls   int     `json:"tool_calls"`
}

// webhookBody renders what is posted for event: a Standard Webhooks event
// or a Slack message. run is nil for a ping.
func (e *Engine) webhookBody(ep *spec.WebhookEndpoint, event string, at time.Time, run *spec.Run, status string) []byte {
	base := strings.TrimRight(e.opts.PublicURL, "/")
	p := WebhookPayload{Type: event, Timestamp: at.UTC().Format(time.RFC3339), Data: WebhookData{URL: base + "/"}}
	if run != nil {
		m := run.Metrics
		p.Data = WebhookData{RunID: run.ID, Objective: run.Objective, Status: status, StopReason: run.StopReason,
			Waiting: run.Waiting, URL: base + "/runs/" + run.ID, Metrics: &WebhookMetrics{Iterations: m.Iterations,
				RunningMS: m.RunningMS, TokensTotal: m.TokensTotal, CostUSD: m.CostTotalUSD, ToolCalls: m.ToolCallsTotal}}
	}
	if ep.Format == spec.WebhookFormatSlack {
		b, _ := json.Marshal(map[string]string{"text": slackText(p, run)})
		return b
	}
	b, _ := json.Marshal(p)
	return b
}

// slackText is a Slack (Mattermost, Discord /slack) message: the
// objective, the outcome, the cost and the link.
func slackText(p WebhookPayload, run *spec.Run) string {
	if run == nil {
		return "Homework webhook test (ping): this endpoint is set up. " + p.Data.URL
	}
	esc := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	title := notifyTitles[p.Data.Status]
	if title == "" {
		title = "Homework " + p.Data.Status
	}
	outcome := p.Data.Status
	switch {
	case p.Data.Waiting != nil && len(p.Data.Waiting.Questions) > 0:
		outcome += " — " + truncate(p.Data.Waiting.Questions[0], 200)
	case p.Data.Waiting != nil:
		outcome += " (" + p.Data.Waiting.Reason + ")"
	case p.Data.StopReason != nil && p.Data.StopReason.Detail != "":
		outcome += " — " + truncate(p.Data.StopReason.Detail, 200)
	}
	objective := truncate(strings.TrimSpace(strings.SplitN(run.Objective, "\n", 2)[0]), 200)
	return fmt.Sprintf("*%s*: %s\nOutcome: %s\nCost: $%.4f · %d iterations\n<%s|Open the run>",
		title, esc.Replace(objective), esc.Replace(outcome), p.Data.Metrics.CostUSD, p.Data.Metrics.Iterations, p.Data.URL)
}

// attemptResult is what one POST came to.
type attemptResult struct {
	status     int
	body       string
	retryAfter time.Duration
	err        error
}

func (r attemptResult) ok() bool { return r.err == nil && r.status >= 200 && r.status < 300 }

// post sends the delivery's body to the endpoint once, signed with this
// attempt's timestamp.
func (e *Engine) post(ctx context.Context, ep *spec.WebhookEndpoint, d *spec.WebhookDelivery) attemptResult {
	wh, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		return attemptResult{err: fmt.Errorf("endpoint secret: %w", err)}
	}
	now := e.now()
	sig, err := wh.Sign(d.WebhookID, now, d.Body)
	if err != nil {
		return attemptResult{err: fmt.Errorf("sign: %w", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(d.Body))
	if err != nil {
		return attemptResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Homework-Webhooks/1")
	req.Header.Set("webhook-id", d.WebhookID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := e.webhookClient.Do(req)
	if err != nil {
		return attemptResult{err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxWebhookResponse))
	res := attemptResult{status: resp.StatusCode, body: string(body)}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	}
	return res
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date; 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// webhookBackoff is the wait after the attempts-th failed attempt: base
// doubling up to max, with ±20% jitter.
func webhookBackoff(attempts int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < attempts && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
	return d + jitter
}

// deliver works one webhook job: one attempt of the delivery, recorded
// together with the job of the next attempt, scheduled after the backoff
// (or Retry-After): a server killed between attempts leaves that job on the
// queue. After WebhookRetryFor since the generation began, the delivery is
// failed instead.
func (e *Engine) deliver(ctx context.Context, args WebhookArgs) error {
	d, ep, err := e.store.FindWebhookDelivery(ctx, args.DeliveryID)
	if spec.ErrorCode(err) == spec.ENOTFOUND {
		return nil // the endpoint was deleted
	} else if err != nil {
		return err
	}
	current := func(d *spec.WebhookDelivery) bool {
		return d.Generation == args.Generation && d.Attempts == args.Attempt && d.State == spec.DeliveryPending
	}
	if !current(d) || !ep.DisabledAt.IsZero() {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, e.opts.WebhookTimeout)
	res := e.post(actx, ep, d)
	cancel()

	since := args.Since
	if since.IsZero() {
		since = d.CreatedAt
	}
	outcome := "delivered"
	// The outcome is recorded even when the server is shutting down.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer wcancel()
	err = e.inTx(wctx, func(tx spec.Tx) error {
		cur, err := tx.FindUserWebhookDelivery(wctx, d.UserID, d.EndpointID, d.ID)
		if err != nil {
			return err
		}
		if !current(cur) {
			outcome = ""
			return nil // redelivered meanwhile: the new generation's job goes on
		}
		cur.Attempts++
		cur.LastStatus, cur.LastResponse, cur.LastError = res.status, res.body, ""
		if res.err != nil {
			cur.LastError = truncate(res.err.Error(), 500)
		} else if !res.ok() {
			cur.LastError = "HTTP " + strconv.Itoa(res.status)
		}
		now := tx.Now()
		if res.ok() {
			cur.State, cur.NextAttemptAt = spec.DeliveryDelivered, time.Time{}
			return tx.UpdateWebhookDelivery(wctx, cur)
		}
		wait := webhookBackoff(cur.Attempts, e.opts.WebhookBackoffBase, e.opts.WebhookBackoffMax)
		if res.retryAfter > 0 {
			wait = res.retryAfter
		}
		if now.Add(wait).After(since.Add(e.opts.WebhookRetryFor)) {
			outcome = "failed"
			cur.State, cur.NextAttemptAt = spec.DeliveryFailed, time.Time{}
			if err := tx.UpdateWebhookDelivery(wctx, cur); err != nil {
				return err
			}
			if err := e.notifyWebhookFailed(wctx, tx, ep, cur); err != nil {
				return err
			}
			return e.disableFailingWebhook(wctx, tx, ep)
		}
		outcome = "retried"
		cur.NextAttemptAt = now.Add(wait)
		if err := tx.UpdateWebhookDelivery(wctx, cur); err != nil {
			return err
		}
		_, err = e.queue.InsertJobTx(wctx, tx, WebhookArgs{DeliveryID: cur.ID, Generation: cur.Generation,
			Attempt: cur.Attempts, Since: since}, cur.NextAttemptAt)
		return err
	})
	if err != nil {
		return err
	}
	if outcome != "" {
		e.metrics.webhookDeliveries.WithLabelValues(outcome).Inc()
	}
	return nil
}

// notifyWebhookFailed tells the person that a delivery was given up.
func (e *Engine) notifyWebhookFailed(ctx context.Context, tx spec.Tx, ep *spec.WebhookEndpoint, d *spec.WebhookDelivery) error {
	host := ep.URL
	if u, err := url.Parse(ep.URL); err == nil {
		host = u.Host
	}
	n := &spec.Notification{UserID: d.UserID, RunID: d.RunID, Kind: "webhook_failed", Title: "A webhook could not be delivered",
		Message:   fmt.Sprintf("%s to %s failed after %d attempts: %s", d.Event, host, d.Attempts, d.LastError),
		ActionURL: "/settings/tokens#webhooks"}
	if err := tx.InsertNotification(ctx, n); err != nil {
		return err
	}
	if d.RunID == "" {
		return nil
	}
	_, err := tx.AppendEvent(ctx, d.RunID, spec.EventNotificationCreated, spec.NotificationData{
		ID: n.ID, Kind: n.Kind, Title: n.Title, Message: n.Message, ActionURL: n.ActionURL,
	})
	return err
}

// disableFailingWebhook disables an endpoint whose deliveries have all
// failed for WebhookDisableAfter, and tells its owner.
func (e *Engine) disableFailingWebhook(ctx context.Context, tx spec.Tx, ep *spec.WebhookEndpoint) error {
	since, err := tx.WebhookFailingSince(ctx, ep.ID)
	if err != nil || since.IsZero() || tx.Now().Sub(since) < e.opts.WebhookDisableAfter {
		return err
	}
	if err := tx.DisableWebhook(ctx, ep.ID); err != nil {
		return err
	}
	return tx.InsertNotification(ctx, &spec.Notification{UserID: ep.UserID, Kind: "webhook_disabled",
		Title: "A webhook was disabled",
		Message: fmt.Sprintf("Every delivery to %s has failed since %s; it is disabled. Delete it and add it again once it answers.",
			ep.URL, since.UTC().Format("2006-01-02 15:04 UTC")),
		ActionURL: "/settings/tokens#webhooks"})
}

// resendInterruptedWebhooks sends again, as a new generation of the same
// delivery (same webhook-id, same attempts and retry window), every delivery
// whose job was running when the last process died: River leaves such a job
// to its stuck-job rescue, a day later. Only for a process alone on its
// queue (SQLite), at its start, when every running job is a dead process's.
func (e *Engine) resendInterruptedWebhooks(ctx context.Context) error {
	n := 0
	err := e.inTx(ctx, func(tx spec.Tx) error {
		n = 0
		running, err := e.queue.RunningArgsTx(ctx, tx, WebhookArgs{}.Kind())
		if err != nil {
			return err
		}
		for _, raw := range running {
			var a WebhookArgs
			if err := json.Unmarshal(raw, &a); err != nil {
				return fmt.Errorf("webhook job args: %w", err)
			}
			d, _, err := e.store.FindWebhookDelivery(ctx, a.DeliveryID)
			if spec.ErrorCode(err) == spec.ENOTFOUND {
				continue
			} else if err != nil {
				return err
			}
			if d.Generation != a.Generation || d.Attempts != a.Attempt || d.State != spec.DeliveryPending {
				continue // it moved on; the job is stale
			}
			d.Generation++
			d.NextAttemptAt = tx.Now()
			if err := tx.UpdateWebhookDelivery(ctx, d); err != nil {
				return err
			}
			if _, err := e.queue.InsertJobTx(ctx, tx, WebhookArgs{DeliveryID: d.ID, Generation: d.Generation, Attempt: d.Attempts, Since: a.Since}, time.Time{}); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if n > 0 {
		e.log.Info("webhook deliveries in flight at the last stop are sent again", "deliveries", n)
	}
	return err
}
