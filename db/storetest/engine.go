package storetest

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"homework/engine/spec"
)

// The engine's side of the contract: slots, leases, metric sums, and the
// multi-process side (spec.Cluster) where the store has one.

// slots: the runs holding a slot are counted, and the oldest queued ones
// come first, under the user's slot lock.
func (s suite) slots(t *testing.T) {
	f := s.fixture(t)
	u, other := f.user("slots@example.com"), f.user("other@example.com")
	var runs []*spec.Run
	for _, id := range []string{"q1", "q2", "q3", "r1", "r2"} {
		runs = append(runs, f.run(u.ID, id))
	}
	f.run(other.ID, "o1")
	for _, r := range runs[3:] {
		r.Status = spec.StatusRunning
		f.tx(func(tx spec.Tx) error { return tx.UpdateRun(f.ctx, r) })
	}
	f.tx(func(tx spec.Tx) error {
		n, err := tx.LockedRunningCount(f.ctx, u.ID)
		if err != nil || n != 2 {
			t.Errorf("running = %d, %v; want 2", n, err)
		}
		// max less the two running: as many of the oldest queued runs as
		// there are free slots, and none when there are none.
		for max, want := range map[int][]string{1: nil, 2: nil, 3: {"q1"}, 4: {"q1", "q2"}, 9: {"q1", "q2", "q3"}} {
			q, err := tx.LockedStartable(f.ctx, u.ID, max)
			if err != nil || !slices.Equal(runIDs(q), want) {
				t.Errorf("startable out of %d slots = %v, %v; want %v", max, runIDs(q), err, want)
			}
		}
		return nil
	})
}

// failedWrites: a write may be sent with the transaction's next statement
// or its commit (PostgreSQL holds blind writes back): wherever its failure
// shows, the transaction fails with it and nothing it wrote is committed.
// A read after a write sees it.
func (s suite) failedWrites(t *testing.T) {
	f := s.fixture(t)
	u := f.user("writes@example.com")
	f.run(u.ID, "there")
	missing := &spec.Run{ID: "missing", UserID: u.ID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
		Config: json.RawMessage(`{}`), Status: spec.StatusRunning}
	// What follows the failing update of a run that is not there: nothing
	// (the commit), a read, another write, an event.
	for name, then := range map[string]func(tx spec.Tx) error{
		"commit": func(spec.Tx) error { return nil },
		"read": func(tx spec.Tx) error {
			_, err := tx.FindRun(f.ctx, "there")
			return err
		},
		"write": func(tx spec.Tx) error {
			return tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: "there", Iteration: 1, Attempt: 1, Status: "running", StartedAt: time.Now()})
		},
		"event": func(tx spec.Tx) error {
			_, err := tx.AppendEvent(f.ctx, "there", "note", map[string]string{"then": "event"})
			return err
		},
	} {
		err := f.s.WriteTx(f.ctx, func(tx spec.Tx) error {
			if err := tx.InsertRun(f.ctx, &spec.Run{ID: "new-" + name, UserID: u.ID, Objective: "o", Mode: spec.ModeAuto,
				Executor: spec.ExecutorScript, Config: json.RawMessage(`{}`), Status: spec.StatusQueued}); err != nil {
				return err
			}
			if err := tx.UpdateRun(f.ctx, missing); err != nil {
				return err
			}
			return then(tx)
		})
		wantCode(t, "updating a missing run, then "+name, err, spec.ENOTFOUND)
		if _, err := f.s.FindRun(f.ctx, u.ID, "new-"+name); spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Errorf("then %s: the run inserted before the failed update was committed (%v)", name, err)
		}
	}
	f.tx(func(tx spec.Tx) error {
		if its, err := tx.RecentIterations(f.ctx, "there", 10); err != nil || len(its) != 0 {
			t.Errorf("iterations written after a failed update: %d, %v", len(its), err)
		}
		return nil
	})
	if evs, err := f.s.ListUserEvents(f.ctx, u.ID, 0, 100); err != nil || len(evs) != 0 {
		t.Errorf("events appended after a failed update: %d, %v", len(evs), err)
	}

	// A read after a write in the same transaction sees it.
	f.tx(func(tx spec.Tx) error {
		r, err := tx.FindRun(f.ctx, "there")
		if err != nil {
			return err
		}
		r.Objective = "changed"
		if err := tx.UpdateRun(f.ctx, r); err != nil {
			return err
		}
		if err := tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: "there", Iteration: 1, Attempt: 1, Status: "running", StartedAt: time.Now()}); err != nil {
			return err
		}
		if again, err := tx.FindRun(f.ctx, "there"); err != nil || again.Objective != "changed" {
			t.Errorf("a read after an update in the same transaction: %+v, %v", again, err)
		}
		if it, err := tx.FindIteration(f.ctx, "there", 1); err != nil || it.Status != "running" {
			t.Errorf("a read after an iteration's write in the same transaction: %+v, %v", it, err)
		}
		return nil
	})
}

func runIDs(runs []*spec.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

// leases: running runs list their lease; a lease is set in a transaction
// and renewed by its owner's current attempt only.
func (s suite) leases(t *testing.T) {
	f := s.fixture(t)
	u := f.user("leases@example.com")
	r := f.run(u.ID, "leased")
	f.run(u.ID, "queued")
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	f.tx(func(tx spec.Tx) error {
		run, err := tx.FindRun(f.ctx, r.ID)
		if err != nil {
			return err
		}
		run.Status, run.Iteration, run.Attempt = spec.StatusRunning, 1, 1
		if err := tx.UpdateRun(f.ctx, run); err != nil {
			return err
		}
		return tx.SetLease(f.ctx, run, "proc-a", until)
	})
	leases, err := f.s.RunningRuns(f.ctx)
	if err != nil || len(leases) != 1 || leases[0].RunID != r.ID || leases[0].Owner != "proc-a" || !leases[0].Until.Equal(until) {
		t.Fatalf("running runs = %+v, %v", leases, err)
	}
	if ok, err := f.s.RenewAttemptLease(f.ctx, r.ID, "proc-a", 1, 1, until.Add(time.Minute)); err != nil || !ok {
		t.Errorf("renewal by the owner's current attempt = %v, %v", ok, err)
	}
	if ok, err := f.s.RenewAttemptLease(f.ctx, r.ID, "proc-b", 1, 1, until.Add(time.Hour)); err != nil || ok {
		t.Errorf("renewal by another owner = %v, %v; want refused", ok, err)
	}
	leases, _ = f.s.RunningRuns(f.ctx)
	if len(leases) != 1 || !leases[0].Until.Equal(until.Add(time.Minute)) {
		t.Errorf("lease after the renewals = %+v", leases)
	}
}

// metricSums: a run's iteration metrics and an iteration's model calls add
// up, in a transaction and outside one.
func (s suite) metricSums(t *testing.T) {
	f := s.fixture(t)
	u := f.user("sums@example.com")
	r := f.run(u.ID, "sums")
	f.tx(func(tx spec.Tx) error {
		for i, m := range []spec.Metrics{{Iterations: 1, RunningMS: 100, TokensTotal: 10, CostTotalUSD: 0.5, ToolCallsTotal: 2},
			{Iterations: 1, RunningMS: 50, TokensTotal: 5, CostTotalUSD: 0.25, ToolCallsTotal: 1}} {
			if err := tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: r.ID, Iteration: i + 1, Attempt: 1, Status: spec.IterSucceeded,
				StartedAt: tx.Now(), Metrics: m}); err != nil {
				return err
			}
		}
		for _, c := range []spec.LLMCall{{Model: "a", PromptTokens: 10, CompletionTokens: 2, CostUSD: 0.1, Priced: true, LatencyMS: 120},
			{Model: "b", PromptTokens: 5, CompletionTokens: 1, LatencyMS: 30}} {
			c.RunID, c.Iteration = r.ID, 2
			if err := tx.InsertLLMCall(f.ctx, &c); err != nil {
				return err
			}
		}
		m, err := tx.SumIterationMetrics(f.ctx, r.ID)
		if err != nil || m.Iterations != 2 || m.RunningMS != 150 || m.TokensTotal != 15 || m.CostTotalUSD != 0.75 || m.ToolCallsTotal != 3 {
			t.Errorf("iteration sums = %+v, %v", m, err)
		}
		// From iteration 1 on, split at 2: iteration 1 settled, 2 the rest.
		settled, rest, err := tx.SumIterationMetricsFrom(f.ctx, r.ID, 1, 2)
		if err != nil || settled.RunningMS != 100 || settled.TokensTotal != 10 || rest.RunningMS != 50 || rest.ToolCallsTotal != 1 {
			t.Errorf("iteration sums split at 2 = %+v and %+v, %v", settled, rest, err)
		}
		// From iteration 2 on: iteration 1 is not read.
		settled, rest, err = tx.SumIterationMetricsFrom(f.ctx, r.ID, 2, 3)
		if err != nil || settled.RunningMS != 50 || rest.Iterations != 0 {
			t.Errorf("iteration sums from 2 split at 3 = %+v and %+v, %v", settled, rest, err)
		}
		calls, err := tx.SumLLMCalls(f.ctx, r.ID, 2)
		if err != nil || calls.LLMCalls != 2 || calls.TokensTotal != 18 || calls.UnpricedCalls != 1 || calls.CostTotalUSD != 0.1 || calls.ModelMS != 150 {
			t.Errorf("model call sums in the transaction = %+v, %v", calls, err)
		}
		return nil
	})
	calls, err := f.s.SumLLMCalls(f.ctx, r.ID, 2)
	if err != nil || calls.LLMCalls != 2 || calls.TokensTotal != 18 || len(calls.ByModel) != 2 {
		t.Errorf("model call sums = %+v, %v", calls, err)
	}
	if none, err := f.s.SumLLMCalls(f.ctx, r.ID, 1); err != nil || none.LLMCalls != 0 {
		t.Errorf("model calls of an iteration without any = %+v, %v", none, err)
	}
}

// cluster: a store shared by several processes records heartbeats, holds
// each process's liveness while it lives, and names the dead among the
// lease holders; it binds command runs to hosts. Stores of one process
// (SQLite) have no such side.
func (s suite) cluster(t *testing.T) {
	f := s.fixture(t)
	c, ok := f.s.(spec.Cluster)
	if !ok {
		t.Skip("a store of one process: no spec.Cluster")
	}
	now := time.Now()
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	if err := c.HoldLiveness(ctx, "alive", func(bool, error) {}); err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(f.ctx, "silent", now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := c.CommandHeartbeat(f.ctx, "alive", now, "host-a", "/root", "cmd_q"); err != nil {
		t.Fatal(err)
	}
	live, err := c.LiveProcesses(f.ctx, now.Add(-time.Minute))
	if err != nil || !live["alive"] || live["silent"] {
		t.Errorf("live processes = %v, %v; want alive only", live, err)
	}
	queues, err := c.LiveCommandQueues(f.ctx, now.Add(-time.Minute))
	if err != nil || !queues["cmd_q"] {
		t.Errorf("live command queues = %v, %v", queues, err)
	}
	u := f.user("cluster@example.com")
	r := f.run(u.ID, "bound")
	f.tx(func(tx spec.Tx) error {
		ctx := tx.(spec.ClusterTx)
		if err := ctx.BindRunHost(f.ctx, r.ID, "host-a", "/root", "cmd_q"); err != nil {
			return err
		}
		host, root, queue, err := ctx.RunHost(f.ctx, r.ID)
		if err != nil || host != "host-a" || root != "/root" || queue != "cmd_q" {
			t.Errorf("run host = %q %q %q, %v", host, root, queue, err)
		}
		run, err := tx.FindRun(f.ctx, r.ID)
		if err != nil {
			return err
		}
		run.Status, run.LeaseOwner, run.LeaseUntil = spec.StatusRunning, "alive", now.Add(time.Minute)
		if live, err := ctx.ProcessLive(f.ctx, "alive"); err != nil || !live {
			t.Errorf("ProcessLive of a live process = %v, %v", live, err)
		}
		return tx.UpdateRun(f.ctx, run)
	})
	if dead, err := c.DeadProcesses(f.ctx, "observer"); err != nil || len(dead) != 0 {
		t.Errorf("dead processes while the lease holder lives = %v, %v", dead, err)
	}
	cancel() // the process's liveness ends, as at its death
	var dead map[string]bool
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if dead, err = c.DeadProcesses(f.ctx, "observer"); err != nil || dead["alive"] {
			break
		}
	}
	if err != nil || !dead["alive"] {
		t.Errorf("dead processes after the holder's liveness ended = %v, %v", dead, err)
	}
	f.tx(func(tx spec.Tx) error {
		if live, err := tx.(spec.ClusterTx).ProcessLive(f.ctx, "alive"); err != nil || live {
			t.Errorf("ProcessLive of a dead process = %v, %v", live, err)
		}
		return nil
	})
}
