package engine

import (
	"context"
	"testing"
	"time"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// An executor's writes queued with the outcome (spec.WithOutcome) commit in
// the transaction that finishes the iteration, are made on their own by an
// attempt that a shutdown interrupted, and are not made by one whose run
// was canceled.
func TestWritesQueuedWithTheOutcome(t *testing.T) {
	note := []scripted.Doc{{Path: "note.md", Content: "done"}}
	hasNote := func(h *harness, u *spec.User, runID string) bool {
		t.Helper()
		_, err := h.db.FindRunDocumentByPath(h.ctx, u.ID, runID, "note.md")
		if err != nil && spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Fatal(err)
		}
		return err == nil
	}

	t.Run("a write queued with the outcome commits with it, its event first", func(t *testing.T) {
		onBothStores(t, func(t *testing.T, store string) {
			h := newHarnessOn(t, store, nil)
			u := h.user("a@example.com")
			r := h.create(u, spec.Config{Script: script(scripted.Step{OutcomeDocs: note,
				Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}}})})
			h.waitStatus(u, r.ID, spec.StatusCompleted)
			if !hasNote(h, u, r.ID) {
				t.Fatal("the document queued with the outcome was not written")
			}
			var types []spec.EventType
			for _, e := range h.events(u, r.ID) {
				types = append(types, e.Type)
			}
			want := []spec.EventType{spec.EventDocumentCreated, spec.EventGateDecision, spec.EventIterationCompleted}
			for i, typ := range types {
				if typ != spec.EventDocumentCreated {
					continue
				}
				if len(types) < i+len(want) || types[i+1] != want[1] || types[i+2] != want[2] {
					t.Fatalf("events %v: the outcome's document event is not the first of the finishing commit", types)
				}
				return
			}
			t.Fatalf("events %v: no document event", types)
		})
	})

	t.Run("an attempt interrupted by a shutdown makes its queued write", func(t *testing.T) {
		h := newHarness(t, func(o *Options) { o.ShutdownGrace = 200 * time.Millisecond })
		u := h.user("a@example.com")
		r := h.create(u, spec.Config{Script: script(scripted.Step{OutcomeDocs: note, SleepFirstMS: 60_000})})
		h.waitFor(u, r.ID, "leased", func(r *spec.Run) bool { return r.LeaseOwner != "" })
		stopCtx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		defer cancel()
		if err := h.e.Stop(stopCtx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if got, _ := h.db.FindRun(h.ctx, u.ID, r.ID); got.Status != spec.StatusRunning {
			t.Fatalf("status %s after shutdown", got.Status)
		}
		if !hasNote(h, u, r.ID) {
			t.Fatal("the interrupted attempt did not make the write queued with its outcome")
		}
		h.events(u, r.ID) // gap-free
	})

	t.Run("a canceled attempt does not make its queued write", func(t *testing.T) {
		h := newHarness(t, nil)
		u := h.user("a@example.com")
		r := h.create(u, spec.Config{Script: script(scripted.Step{OutcomeDocs: note, SleepMS: 60_000})})
		h.waitFor(u, r.ID, "leased", func(r *spec.Run) bool { return r.LeaseOwner != "" })
		if _, err := h.e.Cancel(h.ctx, u.ID, r.ID); err != nil {
			t.Fatal(err)
		}
		h.waitFor(u, r.ID, "iteration recorded", func(r *spec.Run) bool {
			its, _ := h.db.ListIterations(h.ctx, u.ID, r.ID)
			return r.Status == spec.StatusCanceled && len(its) == 1 && its[0].Status != spec.IterRunning
		})
		// The attempt has returned once the engine stops.
		sctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
		defer cancel()
		if err := h.e.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		if hasNote(h, u, r.ID) {
			t.Fatal("a canceled attempt made the write queued with its outcome")
		}
		evs := h.events(u, r.ID)
		if last := evs[len(evs)-1]; last.Type != spec.EventRunCanceled {
			t.Fatalf("the run's last event is %s, not its end", last.Type)
		}
	})
}
