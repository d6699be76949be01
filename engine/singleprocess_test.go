package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// relayStore is a store shared by several processes (spec.Cluster) whose
// Interrupt delivers through a channel, as a broadcast to other processes
// would, to a receiver that calls InterruptLocal. It is a single process
// otherwise: alive, no other process, no command hosts.
type relayStore struct {
	spec.Store
	c chan string
}

func (r *relayStore) Interrupt(ctx context.Context, runID string, cause error) error {
	select {
	case r.c <- runID:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *relayStore) Heartbeat(context.Context, string, time.Time) error { return nil }
func (r *relayStore) LiveProcesses(context.Context, time.Time) (map[string]bool, error) {
	return map[string]bool{}, nil
}
func (r *relayStore) HoldLiveness(context.Context, string, func(bool, error)) error { return nil }
func (r *relayStore) DeadProcesses(context.Context, string) (map[string]bool, error) {
	return map[string]bool{}, nil
}
func (r *relayStore) CommandHeartbeat(context.Context, string, time.Time, string, string, string) error {
	return nil
}
func (r *relayStore) LiveCommandQueues(context.Context, time.Time) (map[string]bool, error) {
	return map[string]bool{}, nil
}
func (r *relayStore) HostWaitingRuns(context.Context) (map[string]string, error) {
	return map[string]string{}, nil
}

var _ spec.Cluster = (*relayStore)(nil)

func TestCancelIsDeliveredThroughTheInterrupter(t *testing.T) {
	var rl *relayStore
	h := newHarness(t, func(o *Options) {
		rl = &relayStore{Store: o.Backend.store, c: make(chan string, 1)}
		o.Backend.store = rl
		o.SharedStore = true
	})
	u := h.user("a@example.com")
	r := h.create(u, spec.Config{Script: script(scripted.Step{SleepMS: 60_000})})
	h.waitFor(u, r.ID, "iteration started", func(r *spec.Run) bool { return r.LeaseOwner != "" })
	if _, err := h.e.Cancel(h.ctx, u.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	var got string
	select {
	case got = <-rl.c:
	case <-time.After(30 * time.Second):
		t.Fatal("Cancel did not go through the interrupter")
	}
	if got != r.ID {
		t.Fatalf("interrupter got run %q, want %q", got, r.ID)
	}
	// The receiving side: the process working the run cancels locally.
	h.e.InterruptLocal(got, errors.New("canceled elsewhere"))
	h.waitFor(u, r.ID, "iteration recorded", func(r *spec.Run) bool {
		its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
		return r.Status == spec.StatusCanceled && len(its) == 1 && its[0].Status != spec.IterRunning
	})
}
