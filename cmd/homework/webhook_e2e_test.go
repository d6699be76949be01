package main

import (
	"path/filepath"
	"testing"
	"time"

	"homework/engine/webhooktest"
)

// TestAWebhookSurvivesASIGKILLBetweenAttempts: the receiver refuses the
// first attempt (503, Retry-After: 2); the server is SIGKILLed while the
// delivery waits for its second attempt; the restarted server delivers it,
// with the same webhook-id, signed.
func TestAWebhookSurvivesASIGKILLBetweenAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "hooks.db")
	flags := []string{"--webhook-allow-http", "--webhook-allow-private", "--public-url", "https://hw.example"}
	first := startServer(t, bin, dbPath, flags...)
	token := userAndToken(t, bin, dbPath)
	rcv := webhooktest.New(t)
	rcv.FailNext("2", 503)

	var ep struct {
		ID     int64  `json:"id"`
		Secret string `json:"secret"`
	}
	if code := first.api(t, token, "POST", "/api/webhooks", map[string]any{"url": rcv.URL + "/hook"}, &ep); code != 201 {
		t.Fatalf("create webhook: %d", code)
	}
	rcv.SetSecret(ep.Secret)
	var created struct {
		RunID string `json:"run_id"`
	}
	if code := first.api(t, token, "POST", "/api/runs", map[string]any{"objective": "hook me", "executor": "script", "script": slowScript(1, 10)}, &created); code != 201 {
		t.Fatalf("create run: %d", code)
	}
	rcv.WaitFor(t, "the first attempt", 30*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) == 1 })
	// Kill once the failed attempt is recorded and the next is scheduled.
	var list struct {
		Deliveries []struct {
			Attempts  int    `json:"attempts"`
			State     string `json:"state"`
			WebhookID string `json:"webhook_id"`
		} `json:"deliveries"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		first.api(t, token, "GET", "/api/webhooks/"+itoa(ep.ID)+"/deliveries", nil, &list)
		if len(list.Deliveries) == 1 && list.Deliveries[0].Attempts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first attempt was not recorded: %+v", list)
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.kill()
	if n := len(rcv.Deliveries()); n != 1 {
		t.Fatalf("the receiver got %d requests before the kill, want 1", n)
	}

	second := startServer(t, bin, dbPath, flags...)
	got := rcv.WaitFor(t, "the second attempt, after the restart", 30*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 2 })
	if len(got) != 2 || got[1].ID != got[0].ID || got[1].ID != list.Deliveries[0].WebhookID || !got[1].Verified || got[1].Type() != "run.completed" {
		t.Fatalf("deliveries %+v", got)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		second.api(t, token, "GET", "/api/webhooks/"+itoa(ep.ID)+"/deliveries", nil, &list)
		if len(list.Deliveries) == 1 && list.Deliveries[0].State == "delivered" && list.Deliveries[0].Attempts == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivery was not recorded as delivered: %+v", list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAWebhookInFlightWhenTheServerDiesIsSentAgain: the server is SIGKILLed
// while its POST waits for the receiver's answer; the restarted server sends
// the delivery again at once (not after River's stuck-job rescue), with the
// same webhook-id, signed.
func TestAWebhookInFlightWhenTheServerDiesIsSentAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "hooks.db")
	flags := []string{"--webhook-allow-http", "--webhook-allow-private", "--public-url", "https://hw.example"}
	first := startServer(t, bin, dbPath, flags...)
	token := userAndToken(t, bin, dbPath)
	rcv := webhooktest.New(t)
	rcv.HoldNext()
	var ep struct {
		ID     int64  `json:"id"`
		Secret string `json:"secret"`
	}
	if code := first.api(t, token, "POST", "/api/webhooks", map[string]any{"url": rcv.URL + "/hook"}, &ep); code != 201 {
		t.Fatalf("create webhook: %d", code)
	}
	rcv.SetSecret(ep.Secret)
	if code := first.api(t, token, "POST", "/api/runs", map[string]any{"objective": "hook me", "executor": "script", "script": slowScript(1, 10)}, nil); code != 201 {
		t.Fatalf("create run: %d", code)
	}
	rcv.WaitFor(t, "the first attempt, held", 30*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) == 1 })
	first.kill()

	startServer(t, bin, dbPath, flags...)
	got := rcv.WaitFor(t, "the delivery sent again after the restart", 30*time.Second, func(ds []webhooktest.Delivery) bool { return len(ds) >= 2 })
	if len(got) != 2 || got[1].ID != got[0].ID || !got[1].Verified || got[1].Type() != "run.completed" {
		t.Fatalf("deliveries %+v", got)
	}
}
