package engine

import (
	"testing"

	"homework/engine/spec"
)

// OnPublish's functions are called as a publish with subscribers for its
// events begins, with its events, before any is delivered, and not for a
// publish nobody subscribed to.
func TestOnPublishIsCalledBeforeDeliveryWhenSomeoneSubscribed(t *testing.T) {
	b := NewBus()
	sub := b.SubscribeRun("r1", 4)
	defer sub.Close()
	var calls [][]*spec.Event
	b.OnPublish(func(evs []*spec.Event) {
		if len(sub.C) != 0 {
			t.Error("called after an event was delivered")
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
		t.Fatalf("calls %v, delivered %d; want one call with the events, then the delivery", calls, len(sub.C))
	}
}
