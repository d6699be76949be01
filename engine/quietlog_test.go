package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for the handler's timers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

func TestQuietRepeatsSaysAnOutageOnceWithItsCount(t *testing.T) {
	var out syncBuffer
	const every = 2 * time.Second
	log := slog.New(QuietRepeats(slog.NewTextHandler(&out, nil), every))
	store := log.With("component", "store")
	river := log.With("component", "river")
	for i := range 400 {
		store.Error("renew lease failed", "err", "connection refused", "i", i)
		river.Error("renew lease failed", "err", "connection refused") // another component: its own line
		store.Warn("renew lease failed")                               // another level: its own line
		log.Info("iteration done", "i", i)                             // below Warn: every one
	}
	store.Error("another failure")
	lines := out.lines()
	count := func(sub string) (n int) {
		for _, l := range lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	if n := count("level=ERROR"); n != 3 {
		t.Errorf("%d error lines before the interval ended, want 3 (store, river, another failure):\n%s", n, strings.Join(lines, "\n"))
	}
	if n := count("iteration done"); n != 400 {
		t.Errorf("%d info lines, want all 400", n)
	}
	deadline := time.Now().Add(15 * time.Second)
	for count("more in the last") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		lines = out.lines()
	}
	for _, want := range []string{
		`level=ERROR msg="renew lease failed (… 399 more in the last 2s)" component=store err="connection refused" i=399 repeated=399`,
		`level=ERROR msg="renew lease failed (… 399 more in the last 2s)" component=river err="connection refused" repeated=399`,
		`level=WARN msg="renew lease failed (… 399 more in the last 2s)" component=store repeated=399`,
	} {
		if count(want) != 1 {
			t.Errorf("no summary line %q in:\n%s", want, strings.Join(lines[len(lines)-5:], "\n"))
		}
	}
	// A new interval: the next one is logged at once.
	store.Error("renew lease failed", "err", "connection refused")
	if lines = out.lines(); !strings.Contains(lines[len(lines)-1], `msg="renew lease failed" component=store`) {
		t.Errorf("after the interval the error was not logged: %s", lines[len(lines)-1])
	}
}
