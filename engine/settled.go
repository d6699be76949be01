package engine

import (
	"context"
	"sync"

	"homework/engine/spec"
)

// settledSums keeps, per run, the sum of the metrics of its iterations
// below some number, so an iteration's record adds up the run's total from
// its newest rows instead of re-reading every row the run ever wrote (which
// made each iteration of a long run slower than the last: a 1,000-iteration
// run spent half its CPU there).
//
// It is safe across processes and transactions because a run's iterations
// below its current one never change again: every write of an iteration
// row (begin, record, cancel, recovery) is of the run's current iteration,
// and iteration numbers only grow. A cached sum is therefore never stale,
// only short of rows, which the next read adds.
type settledSums struct {
	mu   sync.Mutex
	runs map[string]settledSum
}

type settledSum struct {
	below int          // iterations numbered below this are summed
	sum   spec.Metrics // their metrics; never mutated once stored
}

// maxSettledRuns bounds the cache; past it, it starts over (each run then
// reads its rows once more).
const maxSettledRuns = 4096

// sum returns the sum of the metrics of every iteration of the run, current
// being the iteration the caller is recording (rows below it are settled).
func (s *settledSums) sum(ctx context.Context, tx spec.Tx, runID string, current int) (spec.Metrics, error) {
	s.mu.Lock()
	c, ok := s.runs[runID]
	s.mu.Unlock()
	if !ok || c.below > current {
		c = settledSum{below: 1}
	}
	settled, rest, err := tx.SumIterationMetricsFrom(ctx, runID, c.below, current)
	if err != nil {
		return spec.Metrics{}, err
	}
	base := c.sum.Clone()
	base.Add(settled)
	total := base.Clone()
	total.Add(rest)
	s.mu.Lock()
	if s.runs == nil || len(s.runs) >= maxSettledRuns {
		s.runs = map[string]settledSum{}
	}
	if old, ok := s.runs[runID]; !ok || old.below <= current {
		s.runs[runID] = settledSum{below: current, sum: base}
	}
	s.mu.Unlock()
	return total, nil
}
