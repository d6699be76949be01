package engine

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"homework/engine/scripted"
	"homework/engine/spec"
	"homework/engine/webhooktest"
)

// webhookHarness is an engine that may deliver to a receiver on loopback
// over http, retrying quickly.
func webhookHarness(t *testing.T, mod func(*Options)) *harness {
	return newHarness(t, func(o *Options) {
		o.PublicURL = "https://homework.example/"
		o.WebhookAllowHTTP, o.WebhookAllowPrivate = true, true
		o.WebhookBackoffBase, o.WebhookBackoffMax, o.WebhookRetryFor = 20*time.Millisecond, 100*time.Millisecond, 10*time.Second
		if mod != nil {
			mod(o)
		}
	})
}

func (h *harness) endpoint(u *spec.User, rcv *webhooktest.Receiver, format string, events ...string) *spec.WebhookEndpoint {
	h.t.Helper()
	ep, err := h.e.CreateWebhook(h.ctx, u.ID, rcv.URL+"/hook", events, format)
	if err != nil {
		h.t.Fatal(err)
	}
	if !strings.HasPrefix(ep.Secret, "whsec_") {
		h.t.Fatalf("secret %q", ep.Secret)
	}
	rcv.SetSecret(ep.Secret)
	return ep
}

func (h *harness) deliveries(u *spec.User, ep *spec.WebhookEndpoint) []*spec.WebhookDelivery {
	h.t.Helper()
	ds, err := h.db.ListWebhookDeliveries(h.ctx, u.ID, ep.ID, 100)
	if err != nil {
		h.t.Fatal(err)
	}
	return ds
}

// waitDelivery waits until the endpoint's newest delivery is in state.
func (h *harness) waitDelivery(u *spec.User, ep *spec.WebhookEndpoint, state string) *spec.WebhookDelivery {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ds := h.deliveries(u, ep); len(ds) > 0 && ds[0].State == state {
			return ds[0]
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no delivery reached %s: %+v", state, h.deliveries(u, ep))
		}
		time.Sleep(10 * time.Millisecond) // the store has no delivery events to wait on
	}
}

func TestEveryOutcomeIsDeliveredSignedWithItsRun(t *testing.T) {
	h := webhookHarness(t, nil)
	u := h.user("hooks@example.com")
	rcv := webhooktest.New(t)
	h.endpoint(u, rcv, "")

	completed := h.create(u, spec.Config{Objective: "finish", Script: script(scripted.Step{Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}}})})
	h.waitStatus(u, completed.ID, spec.StatusCompleted)
	waiting := h.create(u, spec.Config{Objective: "ask", Script: script(scripted.Step{Status: &spec.Status{NeedsUserInput: true, BlockingQuestions: []string{"Which database?"}}})})
	h.waitStatus(u, waiting.ID, spec.StatusWaiting)
	stopped := h.create(u, spec.Config{Objective: "stop", Budgets: spec.Budgets{MaxIterations: 1}, Script: script(scripted.Step{Status: &spec.Status{RemainingWork: []string{"more"}}})})
	h.waitStatus(u, stopped.ID, spec.StatusStopped)
	canceled := h.create(u, spec.Config{Objective: "cancel", Script: script(scripted.Step{SleepMS: 60_000})})
	if _, err := h.e.Cancel(h.ctx, u.ID, canceled.ID); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(u, canceled.ID, spec.StatusCanceled)
	// No path of the scripted executor fails a run; fail the waiting one
	// the way the worker does.
	if err := h.e.inTx(h.ctx, func(tx spec.Tx) error {
		run, err := tx.FindRun(h.ctx, waiting.ID)
		if err != nil {
			return err
		}
		return h.e.setStatus(h.ctx, tx, run, spec.StatusFailed, &spec.StopReason{Type: spec.StopError, Detail: "broken"}, nil)
	}); err != nil {
		t.Fatal(err)
	}

	got := rcv.WaitFor(t, "five deliveries", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 5 })
	want := map[string]string{spec.WebhookRunCompleted: completed.ID, spec.WebhookRunWaiting: waiting.ID,
		spec.WebhookRunStopped: stopped.ID, spec.WebhookRunCanceled: canceled.ID, spec.WebhookRunFailed: waiting.ID}
	seen := map[string]bool{}
	for _, d := range got {
		if !d.Verified {
			t.Errorf("delivery %s (%s) did not verify: signature %q", d.ID, d.Type(), d.Signature)
		}
		if !strings.HasPrefix(d.ID, "msg_") {
			t.Errorf("webhook-id %q", d.ID)
		}
		var p WebhookPayload
		if err := json.Unmarshal(d.Body, &p); err != nil {
			t.Fatal(err)
		}
		if _, err := time.Parse(time.RFC3339, p.Timestamp); err != nil {
			t.Errorf("timestamp %q: %v", p.Timestamp, err)
		}
		if want[p.Type] != p.Data.RunID || p.Data.URL != "https://homework.example/runs/"+p.Data.RunID || p.Data.Metrics == nil {
			t.Errorf("%s: data %+v", p.Type, p.Data)
		}
		seen[p.Type] = true
		switch p.Type {
		case spec.WebhookRunWaiting:
			if p.Data.Waiting == nil || p.Data.Waiting.Questions[0] != "Which database?" || p.Data.Status != spec.StatusWaiting || p.Data.Objective != "ask" {
				t.Errorf("waiting data %+v", p.Data)
			}
		case spec.WebhookRunStopped:
			if p.Data.StopReason == nil || p.Data.StopReason.Type == "" || p.Data.Metrics.Iterations != 1 {
				t.Errorf("stopped data %+v", p.Data)
			}
		case spec.WebhookRunFailed:
			if p.Data.StopReason == nil || p.Data.StopReason.Detail != "broken" {
				t.Errorf("failed data %+v", p.Data)
			}
		}
	}
	if len(got) != 5 || len(seen) != 5 {
		t.Fatalf("want one delivery of each of 5 events, got %d: %v", len(got), seen)
	}
}

func TestAFailingReceiverGetsTheSameWebhookIDUntilItAnswers(t *testing.T) {
	h := webhookHarness(t, nil)
	u := h.user("retry@example.com")
	rcv := webhooktest.New(t)
	ep := h.endpoint(u, rcv, "", spec.WebhookRunCompleted)
	rcv.FailNext("", 500, 404)
	r := h.create(u, spec.Config{Script: script(scripted.Step{Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}}})})
	h.waitStatus(u, r.ID, spec.StatusCompleted)
	got := rcv.WaitFor(t, "three attempts", 30*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 3 })
	for _, d := range got {
		if d.ID != got[0].ID || !d.Verified {
			t.Fatalf("attempts differ in webhook-id or did not verify: %+v", got)
		}
	}
	d := h.waitDelivery(u, ep, spec.DeliveryDelivered)
	if d.Attempts != 3 || d.LastStatus != 204 || d.WebhookID != got[0].ID || d.RunID != r.ID || d.Event != spec.WebhookRunCompleted {
		t.Fatalf("delivery %+v", d)
	}

	// A redelivery goes out again with the same webhook-id.
	if _, err := h.e.RedeliverWebhook(h.ctx, u.ID, ep.ID, d.ID); err != nil {
		t.Fatal(err)
	}
	got = rcv.WaitFor(t, "the redelivery", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 4 })
	if got[3].ID != d.WebhookID || !got[3].Verified {
		t.Fatalf("redelivery %+v", got[3])
	}
	if d := h.waitDelivery(u, ep, spec.DeliveryDelivered); d.Generation != 2 || d.Attempts != 1 {
		t.Fatalf("redelivered %+v", d)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	h := webhookHarness(t, nil)
	u := h.user("later@example.com")
	rcv := webhooktest.New(t)
	ep := h.endpoint(u, rcv, "")
	rcv.FailNext("2", 503)
	if _, err := h.e.TestWebhook(h.ctx, u.ID, ep.ID); err != nil {
		t.Fatal(err)
	}
	rcv.WaitFor(t, "the first attempt", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 1 })
	var first *spec.WebhookDelivery
	deadline := time.Now().Add(10 * time.Second)
	for first == nil || first.Attempts == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first attempt was not recorded")
		}
		time.Sleep(10 * time.Millisecond)
		first = h.deliveries(u, ep)[0]
	}
	// The backoff alone would be 20 ms; Retry-After asks for 2 s.
	if wait := first.NextAttemptAt.Sub(first.UpdatedAt); wait < 2*time.Second || first.LastStatus != 503 {
		t.Fatalf("next attempt in %v after a 503 with Retry-After: 2 (%+v)", wait, first)
	}
	got := rcv.WaitFor(t, "the second attempt", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 2 })
	if got[1].At.Before(first.NextAttemptAt.Add(-10*time.Millisecond)) || got[1].ID != got[0].ID || got[0].Type() != spec.WebhookPing {
		t.Fatalf("second attempt at %v, scheduled for %v", got[1].At, first.NextAttemptAt)
	}
	h.waitDelivery(u, ep, spec.DeliveryDelivered)
}

func TestADeliveryGivenUpIsFailedAndTheOwnerNotified(t *testing.T) {
	h := webhookHarness(t, func(o *Options) { o.WebhookRetryFor = 300 * time.Millisecond })
	u := h.user("gone@example.com")
	rcv := webhooktest.New(t)
	ep := h.endpoint(u, rcv, "")
	rcv.FailNext("", 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500)
	if _, err := h.e.TestWebhook(h.ctx, u.ID, ep.ID); err != nil {
		t.Fatal(err)
	}
	// How many attempts fit in the 300 ms window depends on the machine's
	// load (one, when the first POST alone outlasts it); that the delivery
	// is given up once the window is over does not.
	d := h.waitDelivery(u, ep, spec.DeliveryFailed)
	if d.Attempts < 1 || d.LastStatus != 500 || d.LastError != "HTTP 500" || d.LastResponse != "receiver failing on command" {
		t.Fatalf("failed delivery %+v", d)
	}
	ns, err := h.db.ListNotifications(h.ctx, u.ID, 0, 10)
	if err != nil || len(ns) != 1 || ns[0].Kind != "webhook_failed" || !strings.Contains(ns[0].Message, "HTTP 500") {
		t.Fatalf("notifications %v %+v", err, ns)
	}
}

func TestAnEndpointFailingLongEnoughIsDisabled(t *testing.T) {
	h := webhookHarness(t, func(o *Options) { o.WebhookRetryFor, o.WebhookDisableAfter = 100*time.Millisecond, time.Millisecond })
	u := h.user("disable@example.com")
	rcv := webhooktest.New(t)
	ep := h.endpoint(u, rcv, "")
	rcv.FailNext("", 500, 500, 500, 500, 500, 500, 500, 500)
	if _, err := h.e.TestWebhook(h.ctx, u.ID, ep.ID); err != nil {
		t.Fatal(err)
	}
	h.waitDelivery(u, ep, spec.DeliveryFailed)
	got, err := h.db.FindWebhook(h.ctx, u.ID, ep.ID)
	if err != nil || got.DisabledAt.IsZero() {
		t.Fatalf("endpoint %+v %v, want disabled", got, err)
	}
	ns, err := h.db.ListNotifications(h.ctx, u.ID, 0, 10)
	if err != nil || len(ns) != 2 || ns[0].Kind != "webhook_disabled" || ns[1].Kind != "webhook_failed" {
		t.Fatalf("notifications %v %+v", err, ns)
	}
	// A run's outcome is no longer delivered to it.
	r := h.create(u, spec.Config{Script: script(scripted.Step{Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}}})})
	h.waitStatus(u, r.ID, spec.StatusCompleted)
	if ds := h.deliveries(u, ep); len(ds) != 1 {
		t.Fatalf("a disabled endpoint got a delivery: %+v", ds)
	}
}

func TestSlackEndpointsGetATextMessage(t *testing.T) {
	h := webhookHarness(t, nil)
	u := h.user("slack@example.com")
	rcv := webhooktest.New(t)
	h.endpoint(u, rcv, spec.WebhookFormatSlack)
	r := h.create(u, spec.Config{Objective: "Write the <release> notes", Script: script(scripted.Step{
		Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}},
		LLM:    []spec.LLMCall{{Model: "m", PromptTokens: 10, CostUSD: 0.25, Priced: true}}})})
	h.waitStatus(u, r.ID, spec.StatusCompleted)
	got := rcv.WaitFor(t, "the message", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 1 })
	var body map[string]string
	if err := json.Unmarshal(got[0].Body, &body); err != nil || len(body) != 1 {
		t.Fatalf("slack body %s: %v", got[0].Body, err)
	}
	text := body["text"]
	for _, want := range []string{"Homework complete", "Write the &lt;release&gt; notes", "Outcome: completed", "$0.2500", "<https://homework.example/runs/" + r.ID + "|Open the run>"} {
		if !strings.Contains(text, want) {
			t.Errorf("slack text lacks %q:\n%s", want, text)
		}
	}
}

func TestAUserReceivesOnlyTheirRunsEvents(t *testing.T) {
	h := webhookHarness(t, nil)
	a, b := h.user("a@example.com"), h.user("b@example.com")
	ra, rb := webhooktest.New(t), webhooktest.New(t)
	h.endpoint(a, ra, "")
	epB := h.endpoint(b, rb, "")
	r := h.create(a, spec.Config{Script: script(scripted.Step{Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}}})})
	h.waitStatus(a, r.ID, spec.StatusCompleted)
	ra.WaitFor(t, "a's delivery", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) == 1 })
	// b's ping is worked after a's run's delivery was inserted: once it
	// arrives, a's event would have too.
	if _, err := h.e.TestWebhook(h.ctx, b.ID, epB.ID); err != nil {
		t.Fatal(err)
	}
	got := rb.WaitFor(t, "b's ping", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 1 })
	if len(got) != 1 || got[0].Type() != spec.WebhookPing {
		t.Fatalf("b got %d deliveries, first %s", len(got), got[0].Body)
	}
	if _, err := h.e.TestWebhook(h.ctx, a.ID, epB.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("a pinging b's endpoint: %v", err)
	}
	if _, err := h.db.ListWebhookDeliveries(h.ctx, a.ID, epB.ID, 10); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("a listing b's deliveries: %v", err)
	}
}

func TestPrivateAddressesAreRefusedAtCreationAndAtConnect(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.WebhookAllowHTTP = true
		o.WebhookBackoffBase, o.WebhookBackoffMax, o.WebhookRetryFor = 20*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond
	})
	u := h.user("ssrf@example.com")
	rcv := webhooktest.New(t)
	for _, url := range []string{rcv.URL, "http://localhost/x", "http://10.1.2.3/x", "http://169.254.169.254/latest", "http://[::1]/x", "http://224.0.0.1/x"} {
		_, err := h.e.CreateWebhook(h.ctx, u.ID, url, nil, "")
		if spec.ErrorCode(err) != spec.EINVALID || spec.ErrorField(err) != "url" {
			t.Errorf("%s: want EINVALID on url, got %v", url, err)
		}
	}
	// A host that resolved to a public address at creation and to a
	// private one now (DNS rebinding) is refused when the dialer connects.
	ep := &spec.WebhookEndpoint{UserID: u.ID, URL: rcv.URL + "/hook", Events: spec.WebhookEvents, Format: "standard", Secret: spec.NewWebhookSecret()}
	if err := h.db.CreateWebhook(h.ctx, ep); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.TestWebhook(h.ctx, u.ID, ep.ID); err != nil {
		t.Fatal(err)
	}
	d := h.waitDelivery(u, ep, spec.DeliveryFailed)
	if !strings.Contains(d.LastError, "prohibited") || d.LastStatus != 0 {
		t.Fatalf("delivery %+v", d)
	}
	if n := len(rcv.Deliveries()); n != 0 {
		t.Fatalf("the receiver on loopback got %d requests", n)
	}
	hs := newHarness(t, nil)
	if _, err := hs.e.CreateWebhook(hs.ctx, hs.user("x@example.com").ID, "http://example.com/x", nil, ""); spec.ErrorCode(err) != spec.EINVALID || spec.ErrorField(err) != "url" {
		t.Fatalf("http without WebhookAllowHTTP: %v", err)
	}
}

func TestWebhookBackoffGrowsToItsCapWithJitter(t *testing.T) {
	for attempts, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 5: 80 * time.Second, 20: time.Hour} {
		got := webhookBackoff(attempts, 5*time.Second, time.Hour)
		if got < want*8/10 || got > want*12/10 {
			t.Errorf("attempt %d: %v, want %v ±20%%", attempts, got, want)
		}
	}
	if got := parseRetryAfter("120", time.Now()); got != 2*time.Minute {
		t.Errorf("Retry-After 120: %v", got)
	}
	now := time.Now()
	if got := parseRetryAfter(now.Add(time.Minute).UTC().Format(http1123), now); got < 58*time.Second || got > time.Minute {
		t.Errorf("Retry-After date: %v", got)
	}
}

const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"
