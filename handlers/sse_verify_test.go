package handlers

import (
	"bufio"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"homework/engine/spec"
)

// TestCredentialsRevokedElsewhereSendNothingMore: a token revoked and a
// session deleted straight in the database, as another process does, end
// their streams before an event written after the revocation is sent on
// them. The heartbeat is an hour: only the verifier can end the streams.
func TestCredentialsRevokedElsewhereSendNothingMore(t *testing.T) {
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

	req, _ := http.NewRequest("GET", ts.URL+"/api/runs/"+id+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := pc.http.Do(req) // the session cookie
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("session stream: %v %v", resp, err)
	}
	bySession := &sseConn{Resp: resp, r: bufio.NewReader(resp.Body)}
	t.Cleanup(bySession.Close)
	byToken := ts.openSSE(t, streamer, "/api/runs/"+id+"/events")
	feed := ts.openSSE(t, streamer, "/api/events?since=0")
	kept := ts.openSSE(t, writer, "/api/runs/"+id+"/events")
	// Read everything already written, so what follows the revocation is new.
	before := lastSeq(t, ts, id)
	for _, c := range []*sseConn{bySession, byToken, kept} {
		readThrough(t, c, before)
	}
	lastID, err := ts.DB.LastUserEventID(ts.ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	readThrough(t, feed, lastID)

	if err := ts.DB.RevokeAPIToken(ts.ctx, u.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	var sessionSecret string
	for _, ck := range pc.http.Jar.Cookies(mustURL(t, ts.URL)) {
		if ck.Name == SessionCookie {
			sessionSecret = ck.Value
		}
	}
	if err := ts.DB.DeleteSession(ts.ctx, sessionSecret); err != nil || sessionSecret == "" {
		t.Fatalf("delete session %q: %v", sessionSecret, err)
	}
	// Written after both revocations.
	ts.expect(t, writer, "POST", "/api/runs/"+id+"/message", map[string]any{"body": "after the revocation"}, http.StatusOK, nil)
	after := lastSeq(t, ts, id)
	for name, c := range map[string]*sseConn{"session": bySession, "token": byToken, "token feed": feed} {
		for _, m := range c.endsWithin(t, 10*time.Second) {
			t.Errorf("%s stream: sent after the revocation: %s %s", name, m.Event, m.Data)
		}
	}
	// The writer's own stream is untouched and gets the new events.
	readThrough(t, kept, after)
}

// readThrough reads c's events until the one with id (seq, or the feed's
// global id) seq.
func readThrough(t *testing.T, c *sseConn, seq int64) {
	t.Helper()
	for {
		m, err := c.NextEvent()
		if err != nil {
			t.Fatalf("reading to seq %d: %v", seq, err)
		}
		if seqOf(t, m) >= seq {
			return
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestStreamChecksAreCoalesced: many streams, of one token and of tokens of
// their own, cost a few credential queries per event, not one per stream
// and event.
func TestStreamChecksAreCoalesced(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = time.Hour })
	u := ts.user(t, "many@example.com")
	id := ts.createRun(t, u, askStep("q"))
	ts.waitStatus(t, u, id, spec.StatusWaiting)
	const streams, messages = 40, 10
	start := lastSeq(t, ts, id)
	conns := make([]*sseConn, streams)
	for i := range conns {
		// Half the streams share the user's token, half have one each.
		streamer := u
		if i%2 == 1 {
			secret, _, err := ts.DB.CreateAPIToken(ts.ctx, u.ID, "stream "+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			streamer = &testUser{User: u.User, Token: secret}
		}
		conns[i] = ts.openSSE(t, streamer, "/api/runs/"+id+"/events")
		readThrough(t, conns[i], start)
	}
	rounds0 := ts.Server.verifier.rounds.Load()
	for i := range messages {
		ts.expect(t, u, "POST", "/api/runs/"+id+"/message", map[string]any{"body": "m" + strconv.Itoa(i)}, http.StatusOK, nil)
		last := lastSeq(t, ts, id)
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() { readThrough(t, c, last) })
		}
		wg.Wait()
	}
	events := lastSeq(t, ts, id) - start
	rounds := ts.Server.verifier.rounds.Load() - rounds0
	t.Logf("%d streams, %d events: %d credential rounds (%d checks asked)", streams, events, rounds, int64(streams)*events)
	// A few rounds per published event (streams of one token share one;
	// streams woken one after the other join the next), far from one per
	// stream and event.
	if rounds == 0 || rounds*4 > int64(streams)*events {
		t.Fatalf("%d rounds for %d streams × %d events: the checks are not coalesced", rounds, streams, events)
	}
}

// TestIdleStreamsShareTheirHeartbeatChecks: idle streams ping, and re-check
// their credentials, on one shared tick, so a heartbeat costs about one
// query for all of them.
func TestIdleStreamsShareTheirHeartbeatChecks(t *testing.T) {
	ts := newTestServer(t, func(o *Options) { o.Heartbeat = 100 * time.Millisecond })
	const streams, pings = 30, 3
	var conns []*sseConn
	for i := range streams {
		u := ts.user(t, "idle"+strconv.Itoa(i)+"@example.com") // a credential each
		conns = append(conns, ts.openSSE(t, u, "/api/events?since=0"))
	}
	rounds0 := ts.Server.verifier.rounds.Load()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			for n := 0; n < pings; {
				m, err := c.Next()
				if err != nil {
					t.Errorf("idle stream: %v", err)
					return
				}
				if m.Comment == "ping" {
					n++
				}
			}
		})
	}
	wg.Wait()
	rounds := ts.Server.verifier.rounds.Load() - rounds0
	t.Logf("%d idle streams, %d pings each: %d credential rounds", streams, pings, rounds)
	// Without a shared tick this is about streams × pings.
	if rounds == 0 || rounds > 2*(pings+1) {
		t.Fatalf("%d rounds for %d streams × %d pings: heartbeat checks are not shared", rounds, streams, pings)
	}
}
