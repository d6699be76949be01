package engine

import (
	"testing"
	"time"

	"homework/engine/spec"
)

func TestIterateJobsListsTheRunsUnfinishedJobsThroughRiver(t *testing.T) {
	h := unstartedEngine(t)
	u := h.user("jobs@example.com")
	a := h.create(u, spec.Config{Script: script(done("a"))})
	b := h.create(u, spec.Config{Script: script(done("b"))})
	var jobs []IterateJob
	err := h.e.inTx(h.ctx, func(tx spec.Tx) error {
		var err error
		jobs, err = h.e.queue.IterateJobs(h.ctx, tx, a.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Iteration != 1 || jobs[0].Attempt != 1 || jobs[0].State != "available" {
		t.Fatalf("run a's jobs = %+v, want its one available job for iteration 1, attempt 1", jobs)
	}
	err = h.e.inTx(h.ctx, func(tx spec.Tx) error {
		if err := h.e.queue.JobCancelTx(h.ctx, tx, jobs[0].ID); err != nil {
			return err
		}
		jobs, err = h.e.queue.IterateJobs(h.ctx, tx, a.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 0 {
		t.Fatalf("a canceled job is still listed: %+v", jobs)
	}
	err = h.e.inTx(h.ctx, func(tx spec.Tx) error {
		jobs, err = h.e.queue.IterateJobs(h.ctx, tx, b.ID)
		return err
	})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("run b's jobs = %+v (%v), want its own one job only", jobs, err)
	}
}

// TestAnIterateJobIsInsertedOnce: inserting an iterate job whose (run,
// iteration, attempt) already has one, whatever that one's state, inserts
// nothing and says so, on both stores (SQLite inserts without returning
// the row, PostgreSQL returns it).
func TestAnIterateJobIsInsertedOnce(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		u := h.user("once@example.com")
		r := h.create(u, spec.Config{Script: script(done("a"))})
		h.waitFor(u, r.ID, "completed", func(r *spec.Run) bool { return r.Status == spec.StatusCompleted })
		later := time.Now().Add(time.Hour)
		for _, c := range []struct {
			args IterateArgs
			want bool
		}{
			{IterateArgs{RunID: r.ID, Iteration: 1, Attempt: 1}, true}, // the run's own job, worked
			{IterateArgs{RunID: r.ID, Iteration: 9, Attempt: 1}, false},
			{IterateArgs{RunID: r.ID, Iteration: 9, Attempt: 1}, true},
			{IterateArgs{RunID: r.ID, Iteration: 9, Attempt: 2}, false},
		} {
			var duplicate bool
			err := h.e.inTx(h.ctx, func(tx spec.Tx) error {
				var err error
				duplicate, err = h.e.queue.InsertTx(h.ctx, tx, c.args, "", later)
				return err
			})
			if err != nil || duplicate != c.want {
				t.Errorf("insert %+v: duplicate %v (%v), want %v", c.args, duplicate, err, c.want)
			}
		}
		var jobs []IterateJob
		err := h.e.inTx(h.ctx, func(tx spec.Tx) error {
			var err error
			jobs, err = h.e.queue.IterateJobs(h.ctx, tx, r.ID)
			return err
		})
		scheduled := 0
		for _, j := range jobs {
			if j.Iteration == 9 {
				scheduled++
			}
		}
		if err != nil || scheduled != 2 {
			t.Errorf("unfinished jobs = %+v (%v), want one for each of iteration 9's attempts", jobs, err)
		}
	})
}
