package engine

import (
	"testing"

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
