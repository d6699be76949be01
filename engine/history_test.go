package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// What an iteration begun in place is given of the earlier ones
// (following) is, row for row and byte for byte, what the store would read
// for it: the newest with its checks, the others without, at most
// historyDepth, gate records "null" or missing read as none; and a summary
// the store would have to repair is not taken as written (the next
// iteration is then enqueued, and reads the store).
func TestFollowingIsWhatTheStoreReads(t *testing.T) {
	onBothStores(t, func(t *testing.T, store string) {
		h := newHarnessOn(t, store, nil)
		u := h.user("recent@example.com")
		// The engine stays in iteration 1 (running rows are not read);
		// the rows after it are written here, as finishing iterations
		// write them.
		r := h.create(u, spec.Config{Script: script(scripted.Step{SleepMS: 60_000})})
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
			if !storedAsWritten(row.Summary) {
				t.Fatalf("iteration %d: summary %q taken for one the store repairs", n, row.Summary)
			}
			got := following(row, recent)
			want, err := h.db.PastIterations(h.ctx, r.ID, n+1, historyDepth)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("iteration %d: given\n%s\nthe store reads\n%s", n, dump(got), dump(want))
			}
			recent = got
		}

		// A summary PostgreSQL would repair is not taken as written.
		for _, s := range []string{"nul \x00 here", "bad \xff utf-8"} {
			if storedAsWritten(s) {
				t.Errorf("%q taken as stored as written", s)
			}
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
