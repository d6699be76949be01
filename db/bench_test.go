package db

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"homework/engine/spec"
)

// BenchmarkEventAppends measures event appends through the store (group
// commit through the one writer) with 256 concurrent producers across many
// runs, against, in the same run on the same machine: raw single-row
// autocommit INSERTs into a plain table (ratio); the real limit, the same
// rows in multi-row INSERTs of 256 by one writer into the store's events
// table with its indexes (vs-batched, the median ratio of five rounds that
// alternate the two); and the same batches into a bare table with no index
// (vs-batched-bare), which shows what the indexes replay and the feed read
// by cost.
//
//	go test ./db -run '^$' -bench EventAppends -benchtime 5000x
func BenchmarkEventAppends(b *testing.B) {
	const producers = 256
	const runs = 64
	ctx := context.Background()

	raw := func(n int) float64 {
		conn, err := sql.Open("sqlite", dsn(filepath.Join(b.TempDir(), "raw.db"), false))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		conn.SetMaxOpenConns(1)
		if _, err := conn.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, run_id TEXT, seq INTEGER, type TEXT, data TEXT, created_at INTEGER)`); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > int64(n) {
						return
					}
					if _, err := conn.Exec(`INSERT INTO t (run_id, seq, type, data, created_at) VALUES (?,?,?,?,?)`,
						fmt.Sprint("r", i%runs), i, "tool_call", `{"i":1}`, i); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds()
	}

	// batched is the real limit: the same rows written by one writer in
	// multi-row INSERTs of 256 rows, one transaction each.
	batched := func(n int) float64 {
		conn, err := sql.Open("sqlite", dsn(filepath.Join(b.TempDir(), "batched.db"), false))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		conn.SetMaxOpenConns(1)
		if _, err := conn.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, run_id TEXT, seq INTEGER, type TEXT, data TEXT, created_at INTEGER)`); err != nil {
			b.Fatal(err)
		}
		const batch = 256
		q := "INSERT INTO t (run_id, seq, type, data, created_at) VALUES " + strings.TrimSuffix(strings.Repeat("(?,?,?,?,?),", batch), ",")
		args := make([]any, 0, 5*batch)
		start := time.Now()
		for i := 0; i < n; i += batch {
			args = args[:0]
			for j := i; j < i+batch; j++ {
				args = append(args, fmt.Sprint("r", j%runs), j, "tool_call", `{"i":1}`, j)
			}
			if _, err := conn.Exec(q, args...); err != nil {
				b.Fatal(err)
			}
		}
		return float64(n) / time.Since(start).Seconds()
	}

	// batchedEvents is the limit for these rows: the same multi-row
	// INSERTs of 256, one writer, one transaction each, into the store's
	// own events table (its indexes are what replay and the feed read by),
	// through plain database/sql with the store's pragmas.
	batchedEvents := func(n int) float64 {
		path := filepath.Join(b.TempDir(), "events.db")
		d, err := Open(ctx, Options{Path: path})
		if err != nil {
			b.Fatal(err)
		}
		u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
		for i := 0; i < runs; i++ {
			newRun(b, d, u.ID, fmt.Sprint("run", i))
		}
		d.Close()
		conn, err := sql.Open("sqlite", dsn(path, false))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		conn.SetMaxOpenConns(1)
		const batch = 256
		q := "INSERT INTO events (run_id, user_id, seq, type, data, created_at) VALUES " + strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?),", batch), ",")
		args := make([]any, 0, 6*batch)
		seq := make([]int64, runs)
		start := time.Now()
		for i := 0; i < n; i += batch {
			args = args[:0]
			for j := i; j < i+batch; j++ {
				r := j % runs
				seq[r]++
				args = append(args, fmt.Sprint("run", r), u.ID, seq[r], "tool_call", `{"i":1}`, time.Now().UnixMilli())
			}
			if _, err := conn.Exec(q, args...); err != nil {
				b.Fatal(err)
			}
		}
		return float64(n) / time.Since(start).Seconds()
	}

	store := func(n int) float64 {
		d, err := Open(ctx, Options{Path: filepath.Join(b.TempDir(), "store.db")})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
		ids := make([]string, runs)
		for i := range ids {
			ids[i] = newRun(b, d, u.ID, fmt.Sprint("run", i)).ID
		}
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > int64(n) {
						return
					}
					if _, err := d.AppendEvent(ctx, ids[i%runs], "tool_call", map[string]int{"i": 1}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds()
	}

	n := max(b.N, 2000)
	b.ResetTimer()
	rawRate := raw(n)
	batchedRate := batched(n)
	// The limit and the store alternate, and vs-batched is the median of
	// the rounds' ratios: on a shared machine the CPU one run gets varies
	// from one moment to the next, and a single pair taken a second apart
	// measured the neighbours as much as the store.
	const rounds = 5
	var eventsRates, storeRates, ratios []float64
	for range rounds {
		e, s := batchedEvents(n), store(n)
		eventsRates, storeRates, ratios = append(eventsRates, e), append(storeRates, s), append(ratios, s/e)
	}
	eventsRate, storeRate := median(eventsRates), median(storeRates)
	b.ReportMetric(storeRate, "store-events/s")
	b.ReportMetric(rawRate, "raw-inserts/s")
	b.ReportMetric(storeRate/rawRate, "ratio")
	b.ReportMetric(batchedRate, "batched-inserts/s")
	b.ReportMetric(storeRate/batchedRate, "vs-batched-bare")
	b.ReportMetric(eventsRate, "batched-events/s")
	b.ReportMetric(median(ratios), "vs-batched")
	b.Logf("events=%d producers=%d: store %.0f events/s; raw single-row autocommit %.0f inserts/s (%.2f×); batched into the events table %.0f rows/s (%.2f× the median of %d alternating rounds, from %.2f to %.2f); batched into a bare table %.0f rows/s (%.2f×)",
		n, producers, storeRate, rawRate, storeRate/rawRate, eventsRate, median(ratios), rounds, slices.Min(ratios), slices.Max(ratios), batchedRate, storeRate/batchedRate)
}

// median returns the median of xs.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkWorkspaceRead measures what an LLM iteration reads of its run's
// workspace every iteration (ListRunDocumentsOutside: the documents outside
// iterations/ and scratchpad/) as the run grows by one summary document an
// iteration: with 100 summaries and with 3,000, and in the same run, the
// raw limit: a plain query of the same rows by their paths on the store's
// own reader. It reports the time per read with 3,000 summaries ÷ with 100
// (growth; 1 is flat) and ÷ the raw query's (vs-raw).
//
//	go test ./db -run '^$' -bench WorkspaceRead -benchtime 2000x
func BenchmarkWorkspaceRead(b *testing.B) {
	ctx := context.Background()
	d := openTest(b, filepath.Join(b.TempDir(), "h.db"))
	u, err := d.CreateUser(ctx, "a@example.com", "x", false)
	if err != nil {
		b.Fatal(err)
	}
	newRun(b, d, u.ID, "r1")
	outside := []string{"", "plan.md", "notes/findings.md", "scratchpad.md", "iterations", "scratchpad"}
	summaries := 0
	grow := func(to int) {
		err := d.WriteTx(ctx, func(tx spec.Tx) error {
			if summaries == 0 {
				for _, p := range outside {
					if _, err := tx.PutDocument(ctx, &spec.Document{RunID: "r1", Path: p, Kind: spec.DocNote, Content: "text of " + p}); err != nil {
						return err
					}
				}
			}
			for ; summaries < to; summaries++ {
				p := fmt.Sprintf("iterations/%03d-summary.md", summaries+1)
				if _, err := tx.PutDocument(ctx, &spec.Document{RunID: "r1", Path: p, Kind: spec.DocNote, Content: strings.Repeat("summary ", 40)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	read := func() time.Duration {
		start := time.Now()
		for range b.N {
			docs, err := d.ListRunDocumentsOutside(ctx, u.ID, "r1", "iterations", "scratchpad")
			if err != nil || len(docs) != len(outside) {
				b.Fatalf("%d documents, %v; want %d", len(docs), err, len(outside))
			}
		}
		return time.Since(start) / time.Duration(b.N)
	}
	raw := func() time.Duration {
		q := `SELECT id, path, content FROM documents WHERE run_id = ? AND path IN (?` + strings.Repeat(", ?", len(outside)-1) + `) ORDER BY path`
		args := []any{"r1"}
		for _, p := range outside {
			args = append(args, p)
		}
		start := time.Now()
		for range b.N {
			rows, err := d.reader.QueryContext(ctx, q, args...)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var id, path, content string
				if err := rows.Scan(&id, &path, &content); err != nil {
					b.Fatal(err)
				}
				n++
			}
			rows.Close()
			if n != len(outside) {
				b.Fatalf("raw query: %d rows, want %d", n, len(outside))
			}
		}
		return time.Since(start) / time.Duration(b.N)
	}
	grow(100)
	small := read()
	grow(3000)
	big, rawBig := read(), raw()
	b.ReportMetric(float64(small.Nanoseconds())/1000, "µs/read-100")
	b.ReportMetric(float64(big.Nanoseconds())/1000, "µs/read-3000")
	b.ReportMetric(float64(big)/float64(small), "growth")
	b.ReportMetric(float64(big)/float64(rawBig), "vs-raw")
	b.Logf("the workspace read with 100 summaries %v, with 3,000 %v (%.2f×); a plain query of the same %d rows by path %v (%.2f×)",
		small, big, float64(big)/float64(small), len(outside), rawBig, float64(big)/float64(rawBig))
}
