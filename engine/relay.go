package engine

import (
	"log/slog"

	"homework/engine/spec"
)

// Relay is the hop from the store to the bus: the store calls Deliver with
// every committed transaction's events, in commit order (it is the store's
// Publish, see engine/spec/store.go), and Deliver logs each run's lifecycle
// steps and publishes the events to the bus's subscribers. It is the only
// way events reach subscribers, so a line is logged, and an event streamed,
// only for what really committed.
type Relay struct {
	bus *Bus
	log *slog.Logger
}

// NewRelay returns the relay from a store to bus, logging to logger.
func NewRelay(bus *Bus, logger *slog.Logger) *Relay { return &Relay{bus: bus, log: logger} }

// Deliver logs and publishes committed events. It must not block (the
// store calls it before its next writer starts).
func (r *Relay) Deliver(evs []*spec.Event) {
	for _, ev := range evs {
		logLifecycle(r.log, ev)
	}
	r.bus.Publish(evs)
}
