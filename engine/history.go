package engine

import (
	"strings"
	"unicode/utf8"

	"homework/engine/spec"
)

// storedAsWritten reports whether every store holds s as written:
// PostgreSQL repairs invalid UTF-8 and NUL.
func storedAsWritten(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// following returns what the iteration after row reads of the earlier
// ones (Store.PastIterations: the last historyDepth finished iterations'
// summaries and gate records, and the newest one's checks), as the store
// would read them when row's summary is stored as written: row (just
// committed, finished) before the ones its own iteration read (recent,
// newest first). An iteration begun in the transaction that finished the
// one before takes them so instead of reading twenty rows and copying
// their JSON again: a finished iteration's row is never written again (see
// settledSums), so these are the rows in the database.
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
