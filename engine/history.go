package engine

import (
	"strings"
	"sync"
	"unicode/utf8"

	"homework/engine/spec"
)

// recentIterations keeps, per run, what its next iteration reads of the
// earlier ones (Store.PastIterations: the last historyDepth finished
// iterations' summaries and gate records, and the newest one's checks), as
// this process committed them, so that a run's iterations back to back do
// not each read twenty rows and copy their JSON again (a tenth of an
// engine iteration's CPU).
//
// An entry is taken only by the iteration it was made for: the one the
// finishing transaction that made it enqueued. It is never stale, because
// a finished iteration's row is never written again (see settledSums: every
// write of an iteration row is of the run's current iteration, and the
// finishing transaction made the next one current), so the rows it holds
// are the rows in the database. It is made only when the stored text is
// exactly what was written: a summary PostgreSQL would have to repair
// (invalid UTF-8, NUL) is read back instead.
type recentIterations struct {
	mu   sync.Mutex
	runs map[string]recentEntry
}

type recentEntry struct {
	next   int                   // the iteration these precede
	recent []*spec.PastIteration // newest first; never mutated once stored
}

// maxRecentRuns bounds the cache; past it, it starts over (each run then
// reads its rows once more).
const maxRecentRuns = 4096

// take returns, and forgets, the iterations before iteration next of the
// run when they are kept.
func (c *recentIterations) take(runID string, next int) ([]*spec.PastIteration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.runs[runID]
	delete(c.runs, runID)
	if !ok || e.next != next {
		return nil, false
	}
	return e.recent, true
}

// finished keeps what the iteration after row will read (following),
// unless the store may hold row's summary otherwise than written.
func (c *recentIterations) finished(row *spec.Iteration, recent []*spec.PastIteration) {
	if !storedAsWritten(row.Summary) {
		c.forget(row.RunID)
		return
	}
	out := following(row, recent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil || len(c.runs) >= maxRecentRuns {
		c.runs = map[string]recentEntry{}
	}
	c.runs[row.RunID] = recentEntry{next: row.Iteration + 1, recent: out}
}

// storedAsWritten reports whether every store holds s as written:
// PostgreSQL repairs invalid UTF-8 and NUL.
func storedAsWritten(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// following returns what the iteration after row reads of the earlier
// ones, as the store would read them when row's summary is stored as
// written: row (just committed, finished) before the ones its own
// iteration read (recent, newest first), at most historyDepth of them.
func following(row *spec.Iteration, recent []*spec.PastIteration) []*spec.PastIteration {
	p := &spec.PastIteration{Iteration: row.Iteration, Summary: row.Summary}
	if len(row.Gate) > 0 && string(row.Gate) != "null" {
		p.Gate = row.Gate
	}
	if len(row.Checks) > 0 {
		p.Checks = row.Checks
	}
	out := make([]*spec.PastIteration, 0, historyDepth)
	out = append(out, p)
	for _, r := range recent {
		if len(out) == historyDepth {
			break
		}
		if r.Checks != nil {
			// Only the newest carries its checks.
			r = &spec.PastIteration{Iteration: r.Iteration, Summary: r.Summary, Gate: r.Gate}
		}
		out = append(out, r)
	}
	return out
}

// forget drops what is kept for the run.
func (c *recentIterations) forget(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.runs, runID)
}
