package engine

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"homework/db"
	"homework/engine/scripted"
	"homework/engine/spec"
)

// BenchmarkIterations measures engine iterations per second with 50
// concurrent runs and an executor that returns at once, and in the same run
// the raw claim-then-complete SQL cycle of a minimal job table on SQLite;
// it reports both and the ratio of the engine's per-iteration cost to the
// raw cycle (target under 20×).
//
//	go test ./engine -run '^$' -bench Iterations -benchtime 1x
func BenchmarkIterations(b *testing.B) {
	const runs = 50
	const perRun = 20
	ctx := context.Background()

	rawRate := rawJobCycles(b, 5000)

	bus := NewBus()
	d, err := db.Open(ctx, db.Options{Path: filepath.Join(b.TempDir(), "bench.db"), OnEvents: bus.Publish})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	e, err := New(Options{Backend: sqliteBackend(d), Bus: bus, Executors: map[string]Executor{spec.ExecutorScript: &scripted.Executor{InTx: d.WriteTx}},
		Workers: 8, MaxConcurrentPerUser: runs, FetchPollInterval: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := d.CreateUser(ctx, "bench@example.com", "x", false)
	steps := make([]scripted.Step, perRun)
	for i := range steps {
		steps[i] = scripted.Step{Status: &spec.Status{RemainingWork: []string{"more"}}}
	}
	steps[perRun-1] = scripted.Step{Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}}}
	sub := bus.SubscribeUser(u.ID, 1<<16)
	defer sub.Close()
	b.ResetTimer()
	start := time.Now()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < runs; i++ {
		if _, err := e.CreateRun(ctx, u, spec.Config{Objective: fmt.Sprint("bench ", i), Executor: spec.ExecutorScript,
			Script: script(steps...), Breakers: spec.Breakers{NoProgress: 100}}); err != nil {
			b.Fatal(err)
		}
	}
	iterations, completed := 0, 0
	for completed < runs {
		ev, ok := <-sub.C
		if !ok {
			b.Fatal("subscription dropped")
		}
		switch ev.Type {
		case "iteration_completed":
			iterations++
		case "run_completed":
			completed++
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	e.Stop(ctx)
	engineRate := float64(iterations) / elapsed.Seconds()
	ratio := rawRate / engineRate
	b.ReportMetric(engineRate, "iterations/s")
	b.ReportMetric(rawRate, "raw-cycles/s")
	b.ReportMetric(ratio, "overhead-ratio")
	b.Logf("%d runs × %d iterations: engine %.0f iterations/s (%.2f ms each); raw claim-then-complete %.0f cycles/s (%.3f ms each); engine/raw per-iteration cost %.1f×",
		runs, perRun, engineRate, 1000/engineRate, rawRate, 1000/rawRate, ratio)
}

// rawJobCycles measures the bare queue cycle on SQLite through one writer:
// insert a job, claim it, complete it.
func rawJobCycles(b *testing.B, n int) float64 {
	conn, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "raw.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	conn.SetMaxOpenConns(1)
	if _, err := conn.Exec(`CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, args TEXT NOT NULL, attempted_at INTEGER, finalized_at INTEGER);
		CREATE INDEX jobs_state ON jobs(state, id)`); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := conn.Exec(`INSERT INTO jobs (state, args) VALUES ('available', ?)`, fmt.Sprintf(`{"run_id":"r%d","iteration":%d,"attempt":1}`, i%50, i)); err != nil {
			b.Fatal(err)
		}
		var id int64
		if err := conn.QueryRow(`UPDATE jobs SET state = 'running', attempted_at = ? WHERE id = (SELECT id FROM jobs WHERE state = 'available' ORDER BY id LIMIT 1) RETURNING id`, i).Scan(&id); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(`UPDATE jobs SET state = 'completed', finalized_at = ? WHERE id = ?`, i, id); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}
