package main

import (
	"bufio"
	"context"
	"encoding/json"
	"homework/engine/spec"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// streamGuard bounds every wait on a stream: a guard against a hung server,
// never what a test's outcome depends on.
const streamGuard = time.Minute

// runStream is an open server-sent event stream of one run, read by its own
// goroutine into events, which is closed when the stream ends.
type runStream struct {
	events chan apiEvent
	ended  chan struct{} // closed when the server ended the stream
	err    error         // the read error, if the stream did not end cleanly
	cancel context.CancelFunc
	seen   []apiEvent
}

// openRunStream opens the run's event stream after sinceSeq as token.
func (s *server) openRunStream(t testing.TB, token, runID string, sinceSeq int64) *runStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/api/runs/"+runID+"/events?since_seq="+strconv.FormatInt(sinceSeq, 10), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("stream run %s: %v", runID, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("stream run %s: status %d", runID, resp.StatusCode)
	}
	rs := &runStream{events: make(chan apiEvent, 1024), ended: make(chan struct{}), cancel: cancel}
	t.Cleanup(cancel)
	go func() {
		defer close(rs.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e apiEvent
			if json.Unmarshal([]byte(data), &e) == nil && e.Type != "" {
				select {
				case rs.events <- e:
				case <-ctx.Done():
					return
				}
			}
		}
		rs.err = sc.Err()
		if rs.err == nil {
			close(rs.ended)
		}
	}()
	return rs
}

// next returns the stream's next event, or ok false when the stream ended.
func (rs *runStream) next(t testing.TB, s *server, what string) (apiEvent, bool) {
	t.Helper()
	select {
	case e, ok := <-rs.events:
		if ok {
			rs.seen = append(rs.seen, e)
		}
		return e, ok
	case <-time.After(streamGuard):
		t.Fatalf("no event for %s while waiting for %s; got %s:\n%s", streamGuard, what, eventTypes(rs.seen), s.log())
	}
	return apiEvent{}, false
}

// until reads events until match accepts one and returns it, failing when
// the stream ends first.
func (rs *runStream) until(t testing.TB, s *server, what string, match func(apiEvent) bool) apiEvent {
	t.Helper()
	for {
		e, ok := rs.next(t, s, what)
		if !ok {
			t.Fatalf("the stream ended (%v) while waiting for %s; got %s:\n%s", rs.err, what, eventTypes(rs.seen), s.log())
		}
		if match(e) {
			return e
		}
	}
}

// rest reads until the server ends the stream and returns what came, failing
// when the connection broke instead.
func (rs *runStream) rest(t testing.TB, s *server) []apiEvent {
	t.Helper()
	var out []apiEvent
	for {
		e, ok := rs.next(t, s, "the end of the stream")
		if !ok {
			break
		}
		out = append(out, e)
	}
	if rs.err != nil {
		t.Fatalf("the stream broke instead of ending: %v", rs.err)
	}
	return out
}

// isType matches events of type typ.
func isType(typ spec.EventType) func(apiEvent) bool {
	return func(e apiEvent) bool { return e.Type == typ }
}

// lastSeqOf returns the run's highest event seq, read through the API.
func lastSeqOf(t testing.TB, s *server, token, runID string) int64 {
	t.Helper()
	var last int64
	for {
		var page struct {
			Events  []apiEvent `json:"events"`
			HasMore bool       `json:"has_more"`
		}
		if code := s.api(t, token, "GET", "/api/runs/"+runID+"/events?limit=1000&since_seq="+strconv.FormatInt(last, 10), nil, &page); code != 200 {
			t.Fatalf("events: %d", code)
		}
		if n := len(page.Events); n > 0 {
			last = page.Events[n-1].Seq
		}
		if !page.HasMore {
			return last
		}
	}
}

// cli runs a homework command as its own process and returns its stdout.
func cli(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("homework %s: %v %s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}
