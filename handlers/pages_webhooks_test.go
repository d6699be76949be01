package handlers

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"homework/engine"
	"homework/engine/spec"
	"homework/engine/webhooktest"
)

var newWebhookSecret = regexp.MustCompile(`id="new-webhook-secret" readonly value="([^"]+)"`)

func TestTheSettingsPageManagesWebhooks(t *testing.T) {
	if onBothStores(t, TestTheSettingsPageManagesWebhooks) {
		return
	}
	ts := newTestServerWith(t, nil, func(o *Options) { o.ScriptRunsEnabled = true }, func(o *engine.Options) {
		o.WebhookAllowHTTP, o.WebhookAllowPrivate = true, true
	})
	ann := ts.signedIn(t, "ann@example.com")
	bob := ts.signedIn(t, "bob@example.com")
	rcv := webhooktest.New(t)

	resp, body := ann.get("/settings/tokens")
	expectStatus(t, resp, body, http.StatusOK, "")
	expectContains(t, body, `id="webhooks"`, "No webhooks yet", `action="/settings/webhooks"`)

	resp, body = ann.post("/settings/webhooks", url.Values{"url": {rcv.URL + "/hook"}, "format": {"standard"}, "events": {"run.completed", "run.failed"}})
	expectStatus(t, resp, body, http.StatusOK, "")
	m := newWebhookSecret.FindStringSubmatch(body)
	if m == nil || !strings.HasPrefix(m[1], "whsec_") {
		t.Fatalf("no secret on the page:\n%s", clipBody(body))
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("the page with the secret may be cached: Cache-Control %q", cc)
	}
	rcv.SetSecret(m[1])
	expectContains(t, body, rcv.URL+"/hook", "run.completed, run.failed", "No deliveries yet")
	eps, err := ts.Store.ListWebhooks(ts.ctx, ts.userID(t, "ann@example.com").ID)
	if err != nil || len(eps) != 1 {
		t.Fatalf("endpoints %v %v", eps, err)
	}
	id := strconv.FormatInt(eps[0].ID, 10)

	// The page shows the secret only once, and bob cannot touch ann's.
	_, body = ann.get("/settings/tokens")
	expectLacks(t, body, m[1])
	resp, body = bob.post("/settings/webhooks/"+id+"/delete", nil)
	expectStatus(t, resp, body, http.StatusNotFound, "")
	resp, body = bob.post("/settings/webhooks/"+id+"/test", nil)
	expectStatus(t, resp, body, http.StatusNotFound, "")
	_, body = bob.get("/settings/tokens")
	expectLacks(t, body, rcv.URL)

	resp, body = ann.post("/settings/webhooks/"+id+"/test", nil)
	expectStatus(t, resp, body, http.StatusSeeOther, "/settings/tokens?done=webhook-tested#webhooks")
	got := rcv.WaitFor(t, "the ping", 20*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) == 1 })
	if !got[0].Verified || got[0].Type() != spec.WebhookPing {
		t.Fatalf("ping %+v", got[0])
	}
	waitUntil(t, "the delivery listed as delivered", func() bool {
		_, body = ann.get("/settings/tokens")
		return strings.Contains(body, `<td class="state">delivered</td>`)
	})

	// Refusals are shown on the page; a missing CSRF token is refused.
	resp, body = ann.post("/settings/webhooks", url.Values{"url": {"ftp://example.com/x"}, "events": {"run.completed"}})
	expectStatus(t, resp, body, http.StatusUnprocessableEntity, "")
	expectContains(t, body, "must be https")
	resp, body = ann.post("/settings/webhooks", url.Values{"url": {rcv.URL}})
	expectStatus(t, resp, body, http.StatusUnprocessableEntity, "")
	expectContains(t, body, "Choose at least one event")
	resp, _ = ann.post("/settings/webhooks/"+id+"/delete", url.Values{"csrf": {"-"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("delete without CSRF: %d", resp.StatusCode)
	}

	resp, body = ann.post("/settings/webhooks/"+id+"/delete", nil)
	expectStatus(t, resp, body, http.StatusSeeOther, "/settings/tokens?done=webhook-deleted#webhooks")
	_, body = ann.get("/settings/tokens?done=webhook-deleted")
	expectContains(t, body, "Webhook deleted.", "No webhooks yet")
}
