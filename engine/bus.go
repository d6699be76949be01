package engine

import (
	"sync"
	"sync/atomic"

	"homework/engine/spec"
)

// Bus fans committed events out to in-process subscribers. Publishing never
// blocks: a subscriber whose buffer is full is dropped (its channel closed
// with Dropped set) and must resubscribe and replay from its cursor.
//
// Bus is the seam for running several processes (section 9 of DESIGN.md):
// a LISTEN/NOTIFY implementation would publish into the same subscribers.
type Bus struct {
	mu     sync.RWMutex
	byRun  map[string]map[*Subscription]struct{}
	byUser map[int64]map[*Subscription]struct{}
	count  atomic.Int64
	peak   atomic.Int64 // the most live subscriptions since ResetPeak
	// published counts Publish calls, incremented as each begins: a reader
	// that sees n knows the first n publishes' events were committed.
	published atomic.Int64
	// onPublish holds the functions a Publish with subscribers calls once
	// it has delivered (OnPublish); copied on write.
	onPublish atomic.Pointer[[]func([]*spec.Event)]
}

// Subscription receives the events of one run or of all one user's runs.
type Subscription struct {
	C       chan *spec.Event
	bus     *Bus
	runID   string
	userID  int64
	once    sync.Once
	dropped atomic.Bool
}

// Dropped reports whether the subscription was dropped for falling behind
// (as opposed to closed by its owner).
func (s *Subscription) Dropped() bool { return s.dropped.Load() }

// Close unsubscribes. It is safe to call more than once and concurrently with
// publishing.
func (s *Subscription) Close() { s.bus.remove(s) }

// NewBus returns an empty bus.
func NewBus() *Bus {
	return &Bus{byRun: map[string]map[*Subscription]struct{}{}, byUser: map[int64]map[*Subscription]struct{}{}}
}

// SubscribeRun subscribes to one run's events with a buffer of size buf.
func (b *Bus) SubscribeRun(runID string, buf int) *Subscription {
	s := &Subscription{C: make(chan *spec.Event, buf), bus: b, runID: runID}
	b.mu.Lock()
	if b.byRun[runID] == nil {
		b.byRun[runID] = map[*Subscription]struct{}{}
	}
	b.byRun[runID][s] = struct{}{}
	b.mu.Unlock()
	b.added()
	return s
}

// SubscribeUser subscribes to every event of the user's runs.
func (b *Bus) SubscribeUser(userID int64, buf int) *Subscription {
	s := &Subscription{C: make(chan *spec.Event, buf), bus: b, userID: userID}
	b.mu.Lock()
	if b.byUser[userID] == nil {
		b.byUser[userID] = map[*Subscription]struct{}{}
	}
	b.byUser[userID][s] = struct{}{}
	b.mu.Unlock()
	b.added()
	return s
}

// Subscribers returns the number of live subscriptions.
func (b *Bus) Subscribers() int { return int(b.count.Load()) }

// PeakSubscribers returns the most subscriptions live at once since
// ResetPeak (or since the bus was made).
func (b *Bus) PeakSubscribers() int { return int(b.peak.Load()) }

// ResetPeak starts PeakSubscribers over from the live subscriptions.
func (b *Bus) ResetPeak() { b.peak.Store(b.count.Load()) }

// added counts a new subscription and raises the peak to it.
func (b *Bus) added() {
	n := b.count.Add(1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (b *Bus) remove(s *Subscription) {
	s.once.Do(func() {
		b.mu.Lock()
		if s.runID != "" {
			if m := b.byRun[s.runID]; m != nil {
				delete(m, s)
				if len(m) == 0 {
					delete(b.byRun, s.runID)
				}
			}
		} else if m := b.byUser[s.userID]; m != nil {
			delete(m, s)
			if len(m) == 0 {
				delete(b.byUser, s.userID)
			}
		}
		close(s.C)
		b.mu.Unlock()
		b.count.Add(-1)
	})
}

// Published returns how many Publish calls have begun. An event received
// from a subscription was published by one of the first Published() calls
// read after receiving it, so a check that starts after reading n
// (or any n' >= n) starts after that event was committed.
func (b *Bus) Published() int64 { return b.published.Load() }

// OnPublish adds fn to the functions called, on the publisher's
// goroutine, by each Publish that has subscribers for its events, once it
// has delivered them (it was counted in Published before it delivered).
// fn must not block.
//
// After, not before: a goroutine fn starts (the server's credential
// round) is then the next to run on the publisher's processor, ahead of the
// subscribers the delivery woke, instead of being pushed behind each of
// them in turn.
func (b *Bus) OnPublish(fn func(events []*spec.Event)) {
	for {
		old := b.onPublish.Load()
		var fns []func([]*spec.Event)
		if old != nil {
			fns = append(fns, *old...)
		}
		fns = append(fns, fn)
		if b.onPublish.CompareAndSwap(old, &fns) {
			return
		}
	}
}

// Publish delivers events, in order, to their subscribers. It never blocks.
func (b *Bus) Publish(events []*spec.Event) {
	b.published.Add(1)
	var slow []*Subscription
	b.mu.RLock()
	for _, e := range events {
		for s := range b.byRun[e.RunID] {
			if !deliver(s, e) {
				slow = append(slow, s)
			}
		}
		for s := range b.byUser[e.UserID] {
			if !deliver(s, e) {
				slow = append(slow, s)
			}
		}
	}
	if fns := b.onPublish.Load(); fns != nil {
		for _, e := range events {
			if b.byRun[e.RunID] != nil || b.byUser[e.UserID] != nil {
				for _, fn := range *fns {
					fn(events)
				}
				break
			}
		}
	}
	b.mu.RUnlock()
	for _, s := range slow {
		b.remove(s)
	}
}

func deliver(s *Subscription, e *spec.Event) bool {
	if s.dropped.Load() {
		return true
	}
	select {
	case s.C <- e:
		return true
	default:
		// Mark at once so no later event reaches it past the gap.
		s.dropped.Store(true)
		return false
	}
}
