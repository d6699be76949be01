package main

import (
	"path/filepath"
	"strings"
	"testing"

	"homework/db/pg/pgtest"
)

// TestTokenRevokedByAnotherProcessEndsItsStream: `homework token revoke`,
// run as its own process on the server's database, ends an open stream of
// that token, and no event written after the command returned is sent on
// it, though the run goes on writing events. The heartbeat (15 s) is longer
// than the run's events are apart, so only the revocation ends the stream.
func TestTokenRevokedByAnotherProcessEndsItsStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "revoke.db")
	s := startServer(t, bin, dbPath)
	revokedStreamCheck(t, bin, dbPath, s, s)
}

// TestTokenRevokedOnPostgresEndsItsStreamOnAnotherServer: the same with two
// server processes on one PostgreSQL database, the stream open on one while
// the run may be worked by either.
func TestTokenRevokedOnPostgresEndsItsStreamOnAnotherServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	url := pgtest.NewDatabase(t)
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	worker := startServer(t, bin, url)
	front := startServer(t, bin, url)
	revokedStreamCheck(t, bin, url, worker, front)
}

// revokedStreamCheck creates a long run through worker, streams it from
// front with a second token, revokes that token with the CLI while the run
// waits for an answer (so the last event before the revocation is known
// exactly), answers with the first token so the run writes again, and
// checks the stream ends with nothing written after the revocation.
func revokedStreamCheck(t *testing.T, bin, dbPath string, worker, front *server) {
	t.Helper()
	token := userAndToken(t, bin, dbPath)
	streamToken := strings.TrimSpace(cli(t, bin, "token", "create", "--email", "crash@example.com", "--name", "streamer", "--db", dbPath))
	var tokenID string
	for _, line := range strings.Split(cli(t, bin, "token", "list", "--email", "crash@example.com", "--db", dbPath), "\n") {
		if id, rest, ok := strings.Cut(line, "\t"); ok && strings.HasPrefix(rest, `"streamer"`) {
			tokenID = id
		}
	}
	if tokenID == "" {
		t.Fatal("the streamer token is not listed")
	}
	var created struct {
		RunID string `json:"run_id"`
	}
	// Iterations of 100 ms, a question after the third, then half a
	// minute more: events keep coming.
	steps := slowScript(4, 100)["steps"].([]map[string]any)[:3]
	steps = append(steps, map[string]any{"summary": "asking", "status": map[string]any{"needs_user_input": true,
		"blocking_questions": []string{"go on?"}, "progress_summary": "asking"}})
	steps = append(steps, slowScript(300, 100)["steps"].([]map[string]any)...)
	if code := worker.api(t, token, "POST", "/api/runs", map[string]any{
		"objective": "keep writing events", "executor": "script", "script": map[string]any{"steps": steps},
	}, &created); code != 201 {
		t.Fatalf("create run: %d", code)
	}
	runID := created.RunID
	t.Cleanup(func() { worker.api(t, token, "POST", "/api/runs/"+runID+"/cancel", nil, nil) })

	stream := front.openRunStream(t, streamToken, runID, 0)
	// The run now waits and writes nothing until it is answered.
	revokedAt := stream.until(t, front, "the question", isType("run_waiting_on_user")).Seq

	out := cli(t, bin, "token", "revoke", "--email", "crash@example.com", "--id", tokenID, "--db", dbPath)
	if !strings.Contains(out, "revoked token "+tokenID) {
		t.Fatalf("token revoke: %q", out)
	}
	if last := lastSeqOf(t, front, token, runID); last != revokedAt {
		t.Fatalf("the waiting run wrote events %d..%d: the revocation's bound is not exact", revokedAt+1, last)
	}
	// Everything after revokedAt is written after the revocation.
	if code := front.api(t, token, "POST", "/api/runs/"+runID+"/respond", map[string]any{"answers": []string{"yes"}}, nil); code != 200 {
		t.Fatalf("respond: %d", code)
	}

	// The run goes on; the stream must end, with nothing past revokedAt.
	rest := stream.rest(t, front)
	for _, e := range rest {
		if e.Seq > revokedAt {
			t.Fatalf("event %d (%s) was written after the token was revoked (at seq %d) and still sent on its stream; after the revocation the stream got %s",
				e.Seq, e.Type, revokedAt, eventTypes(rest))
		}
	}
	// The run did write after the revocation: the stream had something to
	// leak, read here with the other token.
	after := front.openRunStream(t, token, runID, revokedAt)
	if e, ok := after.next(t, front, "an event after the revocation"); !ok || e.Seq <= revokedAt {
		t.Fatalf("no event after the revocation: %+v (%v)", e, ok)
	}
	if code := front.api(t, streamToken, "GET", "/api/runs/"+runID, nil, nil); code != 401 {
		t.Fatalf("the revoked token still reads the run: %d", code)
	}
	t.Logf("the revoked stream ended after %d more events, all written before the revocation (seq <= %d)", len(rest), revokedAt)
}
