package engine

import (
	"testing"

	"homework/engine/spec"
)

// OnPublish's functions are called by a publish with subscribers for its
// events, with its events, once they are delivered, and not for a publish
// nobody subscribed to.
func TestOnPublishIsCalledAfterDeliveryWhenSomeoneSubscribed(t *testing.T) {
	b := NewBus()
	sub := b.SubscribeRun("r1", 4)
	defer sub.Close()
	var calls [][]*spec.Event
	b.OnPublish(func(evs []*spec.Event) {
		if len(sub.C) != len(evs) {
			t.Errorf("called with %d of %d events delivered", len(sub.C), len(evs))
		}
		if b.Published() == 0 {
			t.Error("called before the publish was counted")
		}
		calls = append(calls, evs)
	})
	b.Publish([]*spec.Event{{RunID: "nobody's", UserID: 9}})
	if len(calls) != 0 {
		t.Fatalf("called for a publish nobody subscribed to: %d", len(calls))
	}
	evs := []*spec.Event{{RunID: "r1", UserID: 1, Seq: 1}}
	b.Publish(evs)
	if len(calls) != 1 || calls[0][0] != evs[0] || len(sub.C) != 1 {
		t.Fatalf("calls %v, delivered %d; want one call with the events, after the delivery", calls, len(sub.C))
	}
}
