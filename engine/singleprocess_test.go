package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// relay is an Interrupter that delivers through a channel, as a broadcast
// to other processes would, to a receiver that calls InterruptLocal.
type relay struct {
	c chan string
}

func (r *relay) Interrupt(ctx context.Context, runID string, cause error) error {
	select {
	case r.c <- runID:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestCancelIsDeliveredThroughTheInterrupter(t *testing.T) {
	rl := &relay{c: make(chan string, 1)}
	h := newHarness(t, func(o *Options) { o.Interrupts = rl })
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
