package pg_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"homework/db"
	"homework/db/pg"
	"homework/db/pg/pgtest"
	"homework/engine/spec"
)

// BenchmarkPublishToReceive measures, in one run, the time from appending
// an event to its delivery: through PostgreSQL to another store's listener
// (another process's bus), and within one SQLite store (the in-process
// bus), and prints both p50/p99 and their ratio.
//
//	HOMEWORK_TEST_PG=... go test ./db/pg -run '^$' -bench PublishToReceive -benchtime 1x
func BenchmarkPublishToReceive(b *testing.B) {
	const n = 500
	ctx := context.Background()
	measure := func(appendFn func() error, got <-chan time.Time) []time.Duration {
		out := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if err := appendFn(); err != nil {
				b.Fatal(err)
			}
			out = append(out, (<-got).Sub(start))
		}
		slices.Sort(out)
		return out
	}
	pct := func(d []time.Duration, p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	for range b.N {
		url := pgtest.NewDatabase(b)
		recv := make(chan time.Time, n)
		writer, err := pg.Open(ctx, pg.Options{URL: url})
		if err != nil {
			b.Fatal(err)
		}
		reader, err := pg.Open(ctx, pg.Options{URL: url, OnEvents: func(evs []*spec.Event) {
			for range evs {
				recv <- time.Now()
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		u, _ := writer.CreateUser(ctx, "a@example.com", "h", false)
		run := &spec.Run{ID: "r", UserID: u.ID, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
			Config: []byte(`{}`), Status: spec.StatusRunning}
		writer.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, run) })
		cross := measure(func() error {
			_, err := writer.AppendEvent(ctx, "r", spec.EventToolCall, map[string]int{"n": 1})
			return err
		}, recv)
		writer.Close()
		reader.Close()

		local := make(chan time.Time, n)
		sq, err := db.Open(ctx, db.Options{Path: filepath.Join(b.TempDir(), "h.db"), Lock: true, OnEvents: func(evs []*spec.Event) {
			for range evs {
				local <- time.Now()
			}
		}})
		if err != nil {
			b.Fatal(err)
		}
		su, _ := sq.CreateUser(ctx, "a@example.com", "h", false)
		srun := *run
		srun.UserID = su.ID
		sq.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, &srun) })
		in := measure(func() error {
			_, err := sq.AppendEvent(ctx, "r", spec.EventToolCall, map[string]int{"n": 1})
			return err
		}, local)
		sq.Close()

		b.ReportMetric(float64(pct(cross, 0.99).Microseconds()), "cross-process-p99-µs")
		b.ReportMetric(float64(pct(in, 0.99).Microseconds()), "in-process-p99-µs")
		b.Logf("append→receive over %d events: PostgreSQL to another store p50 %s p99 %s; SQLite in-process p50 %s p99 %s; p99 ratio %.1fx",
			n, pct(cross, 0.5), pct(cross, 0.99), pct(in, 0.5), pct(in, 0.99), float64(pct(cross, 0.99))/float64(pct(in, 0.99)))
	}
}

// BenchmarkConcurrentAppendsOneUserVsMany measures what numbering a user's
// events in commit order costs: 8 writers append 200 events each, every
// append its own transaction, to 8 runs of one user (their commits take
// turns on the user's feed lock) and to 8 runs of 8 users (no shared lock,
// the limit here), and prints both rates and their ratio.
//
//	HOMEWORK_TEST_PG=... go test ./db/pg -run '^$' -bench ConcurrentAppendsOneUserVsMany -benchtime 1x
func BenchmarkConcurrentAppendsOneUserVsMany(b *testing.B) {
	const writers, each = 8, 200
	ctx := context.Background()
	rate := func(oneUser bool) float64 {
		d, err := pg.Open(ctx, pg.Options{URL: pgtest.NewDatabase(b)})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		var runs []string
		var uid int64
		for i := range writers {
			if !oneUser || i == 0 {
				u, err := d.CreateUser(ctx, fmt.Sprintf("u%d@example.com", i), "h", false)
				if err != nil {
					b.Fatal(err)
				}
				uid = u.ID
			}
			id := fmt.Sprint("r", i)
			run := &spec.Run{ID: id, UserID: uid, Objective: "o", Mode: spec.ModeAuto, Executor: spec.ExecutorScript,
				Config: []byte(`{}`), Status: spec.StatusRunning}
			if err := d.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, run) }); err != nil {
				b.Fatal(err)
			}
			runs = append(runs, id)
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, id := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if _, err := d.AppendEvent(ctx, id, spec.EventToolCall, nil); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(writers*each) / time.Since(start).Seconds()
	}
	for range b.N {
		many := rate(false)
		one := rate(true)
		b.ReportMetric(one, "appends/s-one-user")
		b.ReportMetric(many, "appends/s-8-users")
		b.Logf("8 writers, one transaction per append: one user %.0f/s, 8 users %.0f/s (the limit without a shared feed lock); ratio %.2f",
			one, many, one/many)
	}
}
