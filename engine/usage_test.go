package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"homework/engine/spec"
)

// callsThenWait records model calls of 15 tokens each: two in an
// attempt that begins its iteration, one in a recovered attempt. The first
// attempt of iteration 1 then waits for its end, as work a process dies in.
type callsThenWait struct{}

func (callsThenWait) Iterate(ctx context.Context, in *spec.Input) (*spec.Result, error) {
	n := 2
	if in.Attempt > 1 {
		n = 1
	}
	for range n {
		c := spec.LLMCall{Role: "planner", Model: "m", PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.001, Priced: true}
		if err := in.Host.RecordLLMCall(ctx, c); err != nil {
			return nil, err
		}
	}
	if in.Iteration == 1 && in.Attempt == 1 {
		<-ctx.Done()
		return &spec.Result{Summary: "interrupted"}, ctx.Err()
	}
	return &spec.Result{Summary: "worked", Status: &spec.Status{RemainingWork: []string{"more"}}}, nil
}

// TestAnIterationsUsageCountsEveryAttemptsCalls checks the iteration's
// usage as the host counts it: the iteration_cost_update events and the
// iteration's metrics carry every call recorded against the iteration, an
// interrupted attempt's included, and an iteration that begins counts from
// none. The host counts an attempt that begins its iteration from zero and
// reads the store once for any other.
func TestAnIterationsUsageCountsEveryAttemptsCalls(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, func(o *Options) {
			o.ShutdownGrace = 100 * time.Millisecond
			o.Executors[spec.ExecutorScript] = callsThenWait{}
		})
		u := h.user("usage@example.com")
		r := h.create(u, spec.Config{Budgets: spec.Budgets{MaxIterations: 2}})
		h.waitFor(u, r.ID, "the first attempt's calls", func(*spec.Run) bool {
			return countType(h.events(u, r.ID), spec.EventIterationCostUpdate) == 2
		})
		stopCtx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		defer cancel()
		if err := h.e.Stop(stopCtx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		e2 := h.successor(store)
		if store == sqliteStore {
			if n, err := e2.recoverAtStart(h.ctx); err != nil || n != 1 {
				t.Fatalf("recovered %d: %v", n, err)
			}
		}
		if err := e2.Start(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.waitStatus(u, r.ID, spec.StatusStopped)
		var got []string
		for _, e := range h.events(u, r.ID) {
			if e.Type != spec.EventIterationCostUpdate {
				continue
			}
			var d spec.CostUpdateData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%d:%d/%d", d.Iteration, d.IterationTokens, d.TokensTotal))
		}
		// Iteration 1: two calls, then (attempt 2) one more; iteration 2:
		// two calls, counted from none.
		want := []string{"1:15/15", "1:30/30", "1:45/45", "2:15/60", "2:30/75"}
		if !slices.Equal(got, want) {
			t.Fatalf("iteration_cost_update (iteration:iteration tokens/run tokens) %v, want %v", got, want)
		}
		its, err := h.db.ListIterations(h.ctx, u.ID, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(its) != 2 || its[0].Metrics.TokensTotal != 45 || its[0].Metrics.LLMCalls != 3 || its[1].Metrics.TokensTotal != 30 || its[1].Metrics.LLMCalls != 2 {
			t.Fatalf("iterations' usage: %+v", its)
		}
		h.checkMetricsAddUp(u, r.ID)
	})
}
