package main

import (
	"strings"
	"testing"
)

// TestWebhookFlags: --public-url (env HOMEWORK_PUBLIC_URL) defaults to the
// listen address and must be an absolute http(s) URL; the webhook guards'
// switches are off unless set.
func TestWebhookFlags(t *testing.T) {
	cfg, err := parseServeConfig([]string{"--addr", "0.0.0.0:9000"}, noEnv)
	if err != nil || cfg.PublicURL != "http://localhost:9000" || cfg.WebhookAllowHTTP || cfg.WebhookAllowPrivate {
		t.Fatalf("defaults: %v %+v", err, cfg)
	}
	env := map[string]string{"HOMEWORK_PUBLIC_URL": "https://hw.example.com", "HOMEWORK_WEBHOOK_ALLOW_HTTP": "true"}
	cfg, err = parseServeConfig([]string{"--webhook-allow-private"}, func(k string) string { return env[k] })
	if err != nil || cfg.PublicURL != "https://hw.example.com" || !cfg.WebhookAllowHTTP || !cfg.WebhookAllowPrivate {
		t.Fatalf("set: %v %+v", err, cfg)
	}
	if _, err := parseServeConfig([]string{"--public-url", "hw.example.com"}, noEnv); err == nil || !strings.Contains(err.Error(), "--public-url") {
		t.Fatalf("a relative public URL: %v", err)
	}
}
