// Package waitfor is the tests' one way to wait for a run: re-read it each
// time one of its events is published, never on a timer, until a condition
// holds or a generous deadline (a hang guard, not a measurement) passes.
package waitfor

import (
	"testing"
	"time"

	"homework/engine/spec"
)

// Subscribe returns a channel of a run's events and a function that ends the
// subscription. The channel is closed when the subscriber is dropped.
type Subscribe func() (events <-chan *spec.Event, closeFn func())

// Run waits until cond holds for the run load returns, re-reading it after
// every event delivered through subscribe (and subscribing again when the
// subscription is dropped). It fails t, naming what, when timeout passes
// first.
func Run(t testing.TB, what string, timeout time.Duration, subscribe Subscribe, load func() (*spec.Run, error), cond func(*spec.Run) bool) *spec.Run {
	t.Helper()
	events, closeFn := subscribe()
	defer func() { closeFn() }()
	deadline := time.After(timeout)
	for {
		r, err := load()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if cond(r) {
			return r
		}
		select {
		case _, ok := <-events:
			if !ok {
				closeFn()
				events, closeFn = subscribe()
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s; run %s is %s (iteration %d, stop %+v)", what, r.ID, r.Status, r.Iteration, r.StopReason)
		}
	}
}

// Status waits until the run has status.
func Status(t testing.TB, timeout time.Duration, subscribe Subscribe, load func() (*spec.Run, error), status string) *spec.Run {
	t.Helper()
	return Run(t, "status "+status, timeout, subscribe, load, func(r *spec.Run) bool { return r.Status == status })
}
