package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"homework/engine/spec"
)

// hookedStore is the real store with a hook that runs once, right after a
// chosen read returns, whether the read is made on the store or in a read
// transaction: it lets a test commit a change in the middle of a page's
// assembly.
type hookedStore struct {
	spec.Store
	mu    sync.Mutex
	after string // the read after which the hook runs: "FindRun" or "ListRuns"
	hook  func()
	fired bool
}

// arm makes the hook run once after the next read named after.
func (h *hookedStore) arm(after string, hook func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.after, h.hook, h.fired = after, hook, false
}

func (h *hookedStore) read(name string) {
	h.mu.Lock()
	hook := h.hook
	if name != h.after || hook == nil {
		h.mu.Unlock()
		return
	}
	h.hook, h.fired = nil, true
	h.mu.Unlock()
	hook()
}

func (h *hookedStore) didFire() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fired
}

func (h *hookedStore) FindRun(ctx context.Context, userID int64, id string) (*spec.Run, error) {
	r, err := h.Store.FindRun(ctx, userID, id)
	h.read("FindRun")
	return r, err
}

func (h *hookedStore) ListRuns(ctx context.Context, userID int64, f spec.RunFilter) (*spec.RunPage, error) {
	p, err := h.Store.ListRuns(ctx, userID, f)
	h.read("ListRuns")
	return p, err
}

func (h *hookedStore) ReadTx(ctx context.Context, fn func(r spec.ReadStore) error) error {
	return h.Store.ReadTx(ctx, func(r spec.ReadStore) error { return fn(hookedReads{ReadStore: r, h: h}) })
}

type hookedReads struct {
	spec.ReadStore
	h *hookedStore
}

func (r hookedReads) FindRun(ctx context.Context, userID int64, id string) (*spec.Run, error) {
	run, err := r.ReadStore.FindRun(ctx, userID, id)
	r.h.read("FindRun")
	return run, err
}

func (r hookedReads) ListRuns(ctx context.Context, userID int64, f spec.RunFilter) (*spec.RunPage, error) {
	p, err := r.ReadStore.ListRuns(ctx, userID, f)
	r.h.read("ListRuns")
	return p, err
}

// TestPageViewsReadOneSnapshot commits a change (a new iteration, the run
// canceled, its event) between a view's first read and the rest, and
// checks that the run page, its timeline fragment, the run list and the
// API's run view each show the run as it was before the change,
// throughout, and the change on the next view.
func TestPageViewsReadOneSnapshot(t *testing.T) {
	var hooked *hookedStore
	ts := newTestServer(t, func(o *Options) {
		o.ScriptRunsEnabled = true
		hooked = &hookedStore{Store: o.DB}
		o.DB = hooked
	})
	pc := ts.signedIn(t, "ada@example.com")
	ada, _ := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	ctx := context.Background()

	// A run waiting for its person after iteration 1: nothing in the
	// engine touches it until the test does.
	id := "snapshot-run"
	if err := ts.DB.WriteTx(ctx, func(tx spec.Tx) error {
		run := &spec.Run{ID: id, UserID: ada.ID, Objective: "Snapshot objective", Mode: "auto", Executor: "script",
			Config: json.RawMessage(`{"objective":"Snapshot objective","executor":"script","script":{"steps":[{}]}}`),
			Status: spec.StatusWaiting, Iteration: 2, StartedAt: tx.Now()}
		if err := tx.InsertRun(ctx, run); err != nil {
			return err
		}
		if err := tx.UpsertIteration(ctx, &spec.Iteration{RunID: id, Iteration: 1, Attempt: 1, Status: spec.IterSucceeded,
			StartedAt: tx.Now(), EndedAt: tx.Now(), Summary: "First iteration summary."}); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, id, "run_started", nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// change adds iteration n with a marker summary and cancels the run.
	change := func(n int) func() {
		return func() {
			err := ts.DB.WriteTx(ctx, func(tx spec.Tx) error {
				run, err := tx.FindRun(ctx, id)
				if err != nil {
					return err
				}
				if err := tx.UpsertIteration(ctx, &spec.Iteration{RunID: id, Iteration: n, Attempt: 1, Status: spec.IterSucceeded,
					StartedAt: tx.Now(), EndedAt: tx.Now(), Summary: fmt.Sprintf("Late iteration %d summary.", n)}); err != nil {
					return err
				}
				run.Status, run.Iteration, run.CompletedAt = spec.StatusCanceled, n+1, tx.Now()
				if err := tx.UpdateRun(ctx, run); err != nil {
					return err
				}
				_, err = tx.AppendEvent(ctx, id, "run_canceled", map[string]string{"by": "test"})
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}
	}
	lastEventID := func() int64 {
		n, err := ts.DB.LastUserEventID(ctx, ada.ID)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	reset := func() {
		if err := ts.DB.WriteTx(ctx, func(tx spec.Tx) error {
			run, err := tx.FindRun(ctx, id)
			if err != nil {
				return err
			}
			run.Status = spec.StatusWaiting
			return tx.UpdateRun(ctx, run)
		}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("the run page", func(t *testing.T) {
		before := lastEventID()
		hooked.arm("FindRun", change(2))
		resp, page := pc.get("/runs/" + id)
		if resp.StatusCode != http.StatusOK || !hooked.didFire() {
			t.Fatalf("status %d, hook fired %v", resp.StatusCode, hooked.didFire())
		}
		if !strings.Contains(page, `data-status="waiting_on_user"`) || !strings.Contains(page, "First iteration summary.") {
			t.Fatalf("the page does not show the run as its first read saw it: %.400s", page)
		}
		if strings.Contains(page, "Late iteration 2") {
			t.Error("the page shows the run waiting beside an iteration committed after it read the run")
		}
		if want := fmt.Sprintf("/api/events?since_id=%d", before); !strings.Contains(page, want) {
			t.Errorf("the page's feed does not start at the snapshot's last event (%s)", want)
		}
		_, page = pc.get("/runs/" + id)
		if !strings.Contains(page, `data-status="canceled"`) || !strings.Contains(page, "Late iteration 2") {
			t.Error("the next view does not show the change")
		}
	})

	t.Run("the live timeline fragment", func(t *testing.T) {
		reset()
		hooked.arm("FindRun", change(3))
		resp, rows := pc.get("/runs/" + id + "/timeline?from=2")
		if resp.StatusCode != http.StatusOK || !hooked.didFire() {
			t.Fatalf("status %d, hook fired %v", resp.StatusCode, hooked.didFire())
		}
		if !strings.Contains(rows, "Late iteration 2") || strings.Contains(rows, "Late iteration 3") {
			t.Errorf("the fragment mixes snapshots: %.600s", rows)
		}
	})

	t.Run("the run list", func(t *testing.T) {
		reset()
		hooked.arm("ListRuns", change(4))
		resp, list := pc.get("/")
		if resp.StatusCode != http.StatusOK || !hooked.didFire() {
			t.Fatalf("status %d, hook fired %v", resp.StatusCode, hooked.didFire())
		}
		if !strings.Contains(list, `data-status="waiting_on_user"`) {
			t.Fatalf("the list does not show the run waiting: %.400s", list)
		}
		if !strings.Contains(list, "waiting for you") {
			t.Error("the list shows the run waiting but counts no waiting run: the counts were read after the change")
		}
	})

	t.Run("the API's run view", func(t *testing.T) {
		reset()
		token, _, err := ts.DB.CreateAPIToken(ctx, ada.ID, "snapshot")
		if err != nil {
			t.Fatal(err)
		}
		hooked.arm("FindRun", change(5))
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/api/runs/"+id+"?include=iterations", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Status     string `json:"status"`
			Iterations []struct {
				Iteration int `json:"iteration"`
			} `json:"iterations"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || !hooked.didFire() {
			t.Fatalf("status %d, decode %v, hook fired %v", resp.StatusCode, err, hooked.didFire())
		}
		if out.Status != spec.StatusWaiting || len(out.Iterations) != 4 {
			t.Errorf("the run view shows status %s with %d iterations; want %s with 4 (the state before the change)",
				out.Status, len(out.Iterations), spec.StatusWaiting)
		}
	})
}
