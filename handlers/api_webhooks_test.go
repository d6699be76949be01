package handlers

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"homework/engine"
	"homework/engine/spec"
	"homework/engine/webhooktest"
)

// webhookServer is a test server whose engine may deliver to receivers on
// loopback over http, retrying quickly.
func webhookServer(t *testing.T, private bool) *testServer {
	return newTestServerWith(t, nil, nil, func(o *engine.Options) {
		o.PublicURL = "https://hw.example"
		o.WebhookAllowHTTP, o.WebhookAllowPrivate = true, private
		o.WebhookBackoffBase, o.WebhookBackoffMax, o.WebhookRetryFor = 20*time.Millisecond, 100*time.Millisecond, 5*time.Second
	})
}

func TestTheWebhooksAPICreatesListsTestsAndDeletesEndpoints(t *testing.T) {
	if onBothStores(t, TestTheWebhooksAPICreatesListsTestsAndDeletesEndpoints) {
		return
	}
	ts := webhookServer(t, true)
	u, other := ts.user(t, "hooks@example.com"), ts.user(t, "other@example.com")
	rcv := webhooktest.New(t)

	var created WebhookJSON
	ts.expect(t, u, "POST", "/api/webhooks", map[string]any{"url": rcv.URL + "/in", "events": []string{"run.completed", "run.waiting"}}, 201, &created)
	if created.ID == 0 || !strings.HasPrefix(created.Secret, "whsec_") || created.Format != "standard" ||
		strings.Join(created.Events, ",") != "run.completed,run.waiting" {
		t.Fatalf("created %+v", created)
	}
	rcv.SetSecret(created.Secret)
	var list struct{ Webhooks []WebhookJSON }
	ts.expect(t, u, "GET", "/api/webhooks", nil, 200, &list)
	if len(list.Webhooks) != 1 || list.Webhooks[0].ID != created.ID || list.Webhooks[0].Secret != "" {
		t.Fatalf("list %+v: the secret is shown once only", list)
	}

	// A run's outcome and a ping arrive signed; the deliveries list them.
	runID := ts.createRun(t, u, doneStep("done"))
	ts.waitStatus(t, u, runID, spec.StatusCompleted)
	var ping DeliveryJSON
	ts.expect(t, u, "POST", fmt.Sprintf("/api/webhooks/%d/test", created.ID), nil, 202, &ping)
	got := rcv.WaitFor(t, "the outcome and the ping", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 2 })
	types := map[string]bool{}
	var pingID string // the webhook-id the ping arrived with (either may come first)
	for _, d := range got {
		if !d.Verified {
			t.Errorf("delivery %s did not verify", d.ID)
		}
		types[d.Type()] = true
		if d.Type() == "ping" {
			pingID = d.ID
		}
	}
	if !types["run.completed"] || !types["ping"] {
		t.Fatalf("types %v", types)
	}
	var deliveries struct{ Deliveries []DeliveryJSON }
	waitUntil(t, "both deliveries delivered", func() bool {
		ts.expect(t, u, "GET", fmt.Sprintf("/api/webhooks/%d/deliveries", created.ID), nil, 200, &deliveries)
		n := 0
		for _, d := range deliveries.Deliveries {
			if d.State == spec.DeliveryDelivered && d.Attempts == 1 && d.LastStatus == 204 {
				n++
			}
		}
		return n == 2
	})
	if d := deliveries.Deliveries[0]; d.ID != ping.ID || d.Event != "ping" || d.WebhookID != pingID {
		t.Fatalf("newest delivery %+v, ping %+v", d, ping)
	}
	var again DeliveryJSON
	ts.expect(t, u, "POST", fmt.Sprintf("/api/webhooks/%d/deliveries/%d/redeliver", created.ID, ping.ID), nil, 202, &again)
	got = rcv.WaitFor(t, "the redelivery", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 3 })
	if got[2].ID != ping.WebhookID || !got[2].Verified {
		t.Fatalf("redelivery %+v, want webhook-id %s", got[2], ping.WebhookID)
	}

	// Deliveries are counted by outcome, once the attempt's record is
	// written (the receiver has the redelivery a moment before; the
	// endpoint is deleted below only after that).
	waitUntil(t, "the delivered count of 3 in /metrics", func() bool {
		resp, err := http.Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), `homework_webhook_deliveries_total{outcome="delivered"} 3`)
	})

	// Another user sees none of it.
	for _, p := range []struct{ method, path string }{
		{"DELETE", fmt.Sprintf("/api/webhooks/%d", created.ID)},
		{"POST", fmt.Sprintf("/api/webhooks/%d/test", created.ID)},
		{"GET", fmt.Sprintf("/api/webhooks/%d/deliveries", created.ID)},
		{"POST", fmt.Sprintf("/api/webhooks/%d/deliveries/%d/redeliver", created.ID, ping.ID)},
		{"GET", "/api/webhooks/x/deliveries"},
	} {
		ts.expectError(t, other, p.method, p.path, nil, 404, spec.ENOTFOUND, "")
	}
	ts.expect(t, other, "GET", "/api/webhooks", nil, 200, &list)
	if len(list.Webhooks) != 0 {
		t.Fatalf("another user lists %+v", list)
	}

	ts.expectError(t, u, "POST", "/api/webhooks", map[string]any{"url": rcv.URL, "events": []string{"run.exploded"}}, 400, spec.EINVALID, "events")
	ts.expectError(t, u, "POST", "/api/webhooks", map[string]any{"url": rcv.URL, "format": "teams"}, 400, spec.EINVALID, "format")
	ts.expectError(t, u, "POST", "/api/webhooks", map[string]any{"url": "ftp://example.com/x"}, 400, spec.EINVALID, "url")
	ts.expectError(t, u, "POST", "/api/webhooks", map[string]any{}, 400, spec.EINVALID, "url")

	ts.expect(t, u, "DELETE", fmt.Sprintf("/api/webhooks/%d", created.ID), nil, 204, nil)
	ts.expect(t, u, "GET", "/api/webhooks", nil, 200, &list)
	if len(list.Webhooks) != 0 {
		t.Fatalf("after delete %+v", list)
	}
}

func TestTheWebhooksAPIRefusesPrivateAddresses(t *testing.T) {
	ts := webhookServer(t, false)
	u := ts.user(t, "ssrf@example.com")
	for _, url := range []string{"http://127.0.0.1:9/x", "http://localhost/x", "https://192.168.1.1/x", "http://[fe80::1]/x"} {
		eb := ts.expectError(t, u, "POST", "/api/webhooks", map[string]any{"url": url}, 400, spec.EINVALID, "url")
		if !strings.Contains(eb.Error.Message, "address") {
			t.Errorf("%s: %q", url, eb.Error.Message)
		}
	}
}
