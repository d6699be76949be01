package db

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkEventAppends measures event appends through the store (group
// commit through the one writer) with 256 concurrent producers across many
// runs, against raw single-row autocommit INSERTs into a plain table on
// the same machine in the same run, and reports both rates and the ratio.
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
	storeRate := store(n)
	b.ReportMetric(storeRate, "store-events/s")
	b.ReportMetric(rawRate, "raw-inserts/s")
	b.ReportMetric(storeRate/rawRate, "ratio")
	b.ReportMetric(batchedRate, "batched-inserts/s")
	b.ReportMetric(storeRate/batchedRate, "vs-batched")
	b.Logf("events=%d producers=%d: store %.0f events/s, raw single-row autocommit %.0f inserts/s, ratio %.2f×", n, producers, storeRate, rawRate, storeRate/rawRate)
}
