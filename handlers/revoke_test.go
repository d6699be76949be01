package handlers

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"homework/engine/spec"
)

// endsWithin reads the stream's events until it ends, failing when it is
// still open after d (the connection is then closed).
func (c *sseConn) endsWithin(t *testing.T, d time.Duration) []sseMsg {
	t.Helper()
	timer := time.AfterFunc(d, c.Close)
	defer timer.Stop()
	var out []sseMsg
	for {
		m, err := c.NextEvent()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("the stream did not end by itself within %s (%v)", d, err)
		}
		out = append(out, m)
	}
}

func TestSSEEndsWithinAHeartbeatOfATokenRevokedElsewhere(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = 50 * time.Millisecond })
	alice := ts.user(t, "alice@example.com")
	secret, tok, err := ts.DB.CreateAPIToken(ts.ctx, alice.ID, "stream")
	if err != nil {
		t.Fatal(err)
	}
	id := ts.createRun(t, alice, askStep("q"))
	ts.waitStatus(t, alice, id, spec.StatusWaiting)
	streamer := &testUser{User: alice.User, Token: secret}
	feed := ts.openSSE(t, streamer, "/api/events?since=0")
	run := ts.openSSE(t, streamer, "/api/runs/"+id+"/events")
	for _, c := range []*sseConn{feed, run} {
		if _, err := c.NextEvent(); err != nil {
			t.Fatal(err)
		}
	}
	// Revoked straight in the database, as `homework token revoke` does
	// from another process.
	if err := ts.DB.RevokeAPIToken(ts.ctx, alice.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*sseConn{feed, run} {
		c.endsWithin(t, 5*time.Second)
	}
	// The other token's streams are untouched.
	other := ts.openSSE(t, alice, "/api/events?since=0")
	if _, err := other.NextEvent(); err != nil {
		t.Fatalf("a stream of another token: %v", err)
	}
}

func TestLogoutEndsTheSessionsStreamsBeforeAnythingMoreIsSent(t *testing.T) {
	// Only the logout itself can end the stream: no heartbeat re-check.
	ts := newTestServer(t, func(o *Options) { o.ScriptRunsEnabled, o.DefaultModel, o.Heartbeat = true, "test-model", time.Hour })
	pc := ts.signedIn(t, "ada@example.com")
	u, err := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := ts.DB.CreateAPIToken(ts.ctx, u.ID, "api")
	if err != nil {
		t.Fatal(err)
	}
	api := &testUser{User: u, Token: tok}
	id := ts.createRun(t, api, askStep("q"))
	ts.waitStatus(t, api, id, spec.StatusWaiting)

	req, _ := http.NewRequest("GET", ts.URL+"/api/runs/"+id+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := pc.http.Do(req) // the session cookie
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("session stream: %v %v", resp, err)
	}
	stream := &sseConn{Resp: resp, r: bufio.NewReader(resp.Body)}
	t.Cleanup(stream.Close)
	first, err := stream.NextEvent()
	if err != nil {
		t.Fatal(err)
	}
	before := lastSeq(t, ts, id)
	// Read everything already written, so what follows the logout is new.
	for seqOf(t, first) < before {
		if first, err = stream.NextEvent(); err != nil {
			t.Fatal(err)
		}
	}
	if resp, body := pc.post("/logout", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d %s", resp.StatusCode, body)
	}
	// Written after the logout: must not reach the signed-out stream.
	ts.expect(t, api, "POST", "/api/runs/"+id+"/message", map[string]any{"body": "after the logout"}, http.StatusOK, nil)
	for _, m := range stream.endsWithin(t, 5*time.Second) {
		t.Fatalf("sent after the logout: %s %s", m.Event, m.Data)
	}
}

func TestRevokingOnTheTokensPageEndsTheTokensStreamsBeforeAnythingMoreIsSent(t *testing.T) {
	// Only the revocation itself can end the stream: no heartbeat re-check.
	ts := newTestServer(t, func(o *Options) { o.ScriptRunsEnabled, o.DefaultModel, o.Heartbeat = true, "test-model", time.Hour })
	pc := ts.signedIn(t, "ada@example.com")
	u, err := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	secret, tok, err := ts.DB.CreateAPIToken(ts.ctx, u.ID, "streamer")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := ts.DB.CreateAPIToken(ts.ctx, u.ID, "writer")
	if err != nil {
		t.Fatal(err)
	}
	streamer, writer := &testUser{User: u, Token: secret}, &testUser{User: u, Token: other}
	id := ts.createRun(t, writer, askStep("q"))
	ts.waitStatus(t, writer, id, spec.StatusWaiting)
	stream := ts.openSSE(t, streamer, "/api/runs/"+id+"/events")
	m, err := stream.NextEvent()
	if err != nil {
		t.Fatal(err)
	}
	for before := lastSeq(t, ts, id); seqOf(t, m) < before; {
		if m, err = stream.NextEvent(); err != nil {
			t.Fatal(err)
		}
	}
	pc.get("/settings/tokens") // the page's CSRF token
	if resp, body := pc.post("/settings/tokens/"+strconv.FormatInt(tok.ID, 10)+"/revoke", url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", resp.StatusCode, body)
	}
	// Written after the revocation: must not reach the revoked token's stream.
	ts.expect(t, writer, "POST", "/api/runs/"+id+"/message", map[string]any{"body": "after the revocation"}, http.StatusOK, nil)
	for _, m := range stream.endsWithin(t, 5*time.Second) {
		t.Fatalf("sent after the revocation: %s %s", m.Event, m.Data)
	}
}
