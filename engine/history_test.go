package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// What the engine keeps of a run's recent iterations is, row for row and
// byte for byte, what the store would read for the next iteration: the
// newest with its checks, the others without, at most historyDepth, gate
// records "null" or missing read as none; and a summary the store would
// have to repair is not kept at all.
func TestKeptRecentIterationsAreWhatTheStoreReads(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		u := h.user("recent@example.com")
		// The engine stays in iteration 1 (running rows are not read);
		// the rows after it are written here, as finishing iterations
		// write them.
		r := h.create(u, spec.Config{Script: script(scripted.Step{SleepMS: 60_000})})
		var c recentIterations
		var recent []*spec.PastIteration
		for n := 2; n <= 2+historyDepth+5; n++ {
			rec := spec.GateRecord{Decision: spec.Decision{Decision: spec.DecisionContinue, Reasons: []string{fmt.Sprintf("reason %d", n)}},
				Signals: spec.Signals{Progress: fmt.Sprintf("fp%d", n%3)}}
			gate, _ := json.Marshal(rec)
			row := &spec.Iteration{RunID: r.ID, Iteration: n, Attempt: 1, Status: spec.IterSucceeded,
				StartedAt: h.e.now(), EndedAt: h.e.now(), Summary: fmt.Sprintf("summary %d: <&> \"quoted\" é\nline", n),
				Gate: gate, Checks: json.RawMessage(fmt.Sprintf(`[{"name":"c%d","passed":%t}]`, n, n%2 == 0))}
			switch n % 5 {
			case 1:
				row.Gate = json.RawMessage("null")
			case 2:
				row.Gate = nil
			case 3:
				row.Checks = json.RawMessage("[]")
			}
			if err := h.db.WriteTx(h.ctx, func(tx spec.Tx) error { return tx.UpsertIteration(h.ctx, row) }); err != nil {
				t.Fatal(err)
			}
			c.finished(row, recent)
			if _, ok := c.take(r.ID, n+2); ok {
				t.Fatalf("iteration %d: what was kept for iteration %d was taken for %d", n, n+1, n+2)
			}
			c.finished(row, recent)
			got, ok := c.take(r.ID, n+1)
			if !ok {
				t.Fatalf("iteration %d: nothing kept for the next", n)
			}
			if _, ok := c.take(r.ID, n+1); ok {
				t.Fatalf("iteration %d: what was kept was taken twice", n)
			}
			want, err := h.db.PastIterations(h.ctx, r.ID, n+1, historyDepth)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("iteration %d: kept\n%s\nthe store reads\n%s", n, dump(got), dump(want))
			}
			recent = got
		}

		// A summary PostgreSQL would repair is read back, not kept.
		row := &spec.Iteration{RunID: r.ID, Iteration: 100, Attempt: 1, Status: spec.IterSucceeded, Summary: "nul \x00 here"}
		c.finished(row, recent)
		if _, ok := c.take(r.ID, 101); ok {
			t.Fatal("a summary with a NUL was kept")
		}
	})
}

func dump(ps []*spec.PastIteration) string {
	out := ""
	for _, p := range ps {
		out += fmt.Sprintf("  %d %q gate=%s checks=%s\n", p.Iteration, p.Summary, p.Gate, p.Checks)
	}
	return out
}
