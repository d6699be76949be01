package handlers

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"homework/engine/spec"
)

// TestUserFeedStreamUnderConcurrentWriters follows a user's feed over SSE
// while writers append to several of the user's runs at once, each in its
// own transactions: the stream delivers every event exactly once, ids
// rising, on both stores. On PostgreSQL two such transactions may commit in
// the other order than they drew ids; the feed must still lose nothing.
func TestUserFeedStreamUnderConcurrentWriters(t *testing.T) {
	if onBothStores(t, TestUserFeedStreamUnderConcurrentWriters) {
		return
	}
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	var runs []string
	for range 4 {
		id := ts.createRun(t, alice, doneStep("done"))
		ts.waitStatus(t, alice, id, spec.StatusCompleted)
		runs = append(runs, id)
	}
	c := ts.openSSE(t, alice, "/api/events?since=0")
	// The replay of the runs' own events comes first; writers start after.
	var lastID int64
	for {
		m, err := c.NextEvent()
		if err != nil {
			t.Fatal(err)
		}
		e := m.event(t)
		lastID = e.ID
		if e.RunID == runs[len(runs)-1] && m.Event == "run_completed" {
			break
		}
	}
	const each = 40
	var wg sync.WaitGroup
	for _, id := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := ts.Store.AppendEvent(ts.ctx, id, "test_event", map[string]int{"i": i}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := map[string]bool{}
	done, gaveUp := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for len(seen) < len(runs)*each {
			m, err := c.NextEvent()
			if err != nil {
				select {
				case <-gaveUp:
				default:
					t.Errorf("feed: %v after %d of %d events", err, len(seen), len(runs)*each)
				}
				return
			}
			e := m.event(t)
			if e.ID <= lastID {
				t.Errorf("id %d after %d", e.ID, lastID)
				return
			}
			lastID = e.ID
			k := fmt.Sprintf("%s/%d", e.RunID, e.Seq)
			if seen[k] {
				t.Errorf("event %s twice", k)
				return
			}
			seen[k] = true
		}
	}()
	wg.Wait()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		close(gaveUp)
		c.Close()
		<-done
		t.Fatalf("the feed delivered %d of %d events: some were skipped", len(seen), len(runs)*each)
	}
}
