package engine

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"homework/db"
	"homework/db/pg"
	"homework/db/pg/pgtest"
	"homework/engine/scripted"
	"homework/engine/spec"
)

// BenchmarkIterations measures engine iterations per second with 50
// concurrent runs and an executor that returns at once, and in the same run
// the raw claim-then-complete SQL cycle of a minimal job table on SQLite;
// it reports both and the ratio of the engine's per-iteration cost to the
// raw cycle.
//
//	go test ./engine -run '^$' -bench '^BenchmarkIterations$' -benchtime 1x
func BenchmarkIterations(b *testing.B) {
	ctx := context.Background()
	written := writtenBytes()
	rawRate := rawJobCycles(b, 5000)
	rawWritten := float64(writtenBytes()-written) / 5000
	bus := NewBus()
	d, err := db.Open(ctx, db.Options{Path: filepath.Join(b.TempDir(), "bench.db"), OnEvents: bus.Publish})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	benchEngine(b, d, sqliteBackend(d), bus, false, rawRate, rawWritten)
}

// BenchmarkIterationsPostgres is BenchmarkIterations on PostgreSQL: the
// engine (River on pgx, the shared store) against the same raw cycle on a
// minimal job table in the same database, autocommit statements through one
// pgx connection.
//
//	HOMEWORK_TEST_PG=... go test ./engine -run '^$' -bench IterationsPostgres -benchtime 1x
func BenchmarkIterationsPostgres(b *testing.B) {
	if os.Getenv("HOMEWORK_TEST_PG") == "" {
		b.Skip("HOMEWORK_TEST_PG is not set")
	}
	ctx := context.Background()
	url := pgtest.NewDatabase(b)
	rawRate := rawJobCyclesPG(b, url, 5000)
	bus := NewBus()
	d, err := pg.Open(ctx, pg.Options{URL: url, OnEvents: bus.Publish})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	benchEngine(b, d, Bind(d, riverpgxv5.New(d.Pool()), func(tx spec.Tx) pgx.Tx { return tx.(*pg.Tx).PG }), bus, true, rawRate, 0)
}

// benchEngine works 50 runs of 20 instant iterations on an engine over
// store and reports its rate against rawRate and, when rawWritten is not
// 0 (the database is this process's), the bytes written per iteration
// against the raw cycle's: a figure the machine's load does not move.
func benchEngine(b *testing.B, store spec.Store, backend Backend, bus *Bus, shared bool, rawRate, rawWritten float64) {
	const runs = 50
	const perRun = 20
	ctx := context.Background()
	e, err := New(Options{Backend: backend, Bus: bus, Executors: map[string]Executor{spec.ExecutorScript: &scripted.Executor{InTx: store.WriteTx}},
		Workers: 8, MaxConcurrentPerUser: runs, FetchPollInterval: 20 * time.Millisecond, SharedStore: shared})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := store.CreateUser(ctx, "bench@example.com", "x", false)
	steps := make([]scripted.Step, perRun)
	for i := range steps {
		steps[i] = scripted.Step{Status: &spec.Status{RemainingWork: []string{"more"}}}
	}
	steps[perRun-1] = scripted.Step{Status: &spec.Status{ExitSignal: true, CompletionEvidence: []string{"ok"}}}
	sub := bus.SubscribeUser(u.ID, 1<<16)
	defer sub.Close()
	b.ResetTimer()
	written := writtenBytes()
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
	perIteration := float64(writtenBytes()-written) / float64(iterations)
	b.StopTimer()
	e.Stop(ctx)
	engineRate := float64(iterations) / elapsed.Seconds()
	ratio := rawRate / engineRate
	b.ReportMetric(engineRate, "iterations/s")
	b.ReportMetric(rawRate, "raw-cycles/s")
	b.ReportMetric(ratio, "overhead-ratio")
	if rawWritten > 0 {
		b.ReportMetric(perIteration, "written-B/iteration")
		b.ReportMetric(rawWritten, "raw-written-B/cycle")
		b.Logf("written per iteration %.0f KB (WAL and checkpoints), per raw cycle %.0f KB: %.1f×", perIteration/1024, rawWritten/1024, perIteration/rawWritten)
	}
	b.Logf("%d runs × %d iterations: engine %.0f iterations/s (%.2f ms each); raw claim-then-complete %.0f cycles/s (%.3f ms each); engine/raw per-iteration cost %.1f×",
		runs, perRun, engineRate, 1000/engineRate, rawRate, 1000/rawRate, ratio)
}

// rawJobCyclesPG is rawJobCycles on PostgreSQL: the same three autocommit
// statements on a minimal job table, through one pgx connection.
func rawJobCyclesPG(b *testing.B, url string, n int) float64 {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE raw_jobs (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, args JSONB NOT NULL, attempted_at BIGINT, finalized_at BIGINT);
		CREATE INDEX raw_jobs_state ON raw_jobs(state, id)`); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := conn.Exec(ctx, `INSERT INTO raw_jobs (state, args) VALUES ('available', $1)`, fmt.Sprintf(`{"run_id":"r%d","iteration":%d,"attempt":1}`, i%50, i)); err != nil {
			b.Fatal(err)
		}
		var id int64
		if err := conn.QueryRow(ctx, `UPDATE raw_jobs SET state = 'running', attempted_at = $1 WHERE id = (SELECT id FROM raw_jobs WHERE state = 'available' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id`, i).Scan(&id); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `UPDATE raw_jobs SET state = 'completed', finalized_at = $1 WHERE id = $2`, i, id); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// rawJobCycles measures the bare queue cycle on SQLite through one writer
// with the store's own pragmas: insert a job, claim it, complete it.
func rawJobCycles(b *testing.B, n int) float64 {
	conn, err := sql.Open("sqlite", db.WriterDSN(filepath.Join(b.TempDir(), "raw.db")))
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

// writtenBytes returns how many bytes this process has written so far
// (wchar in /proc/self/io: the WAL's frames and the checkpoints' pages,
// whether or not they reach the disk), or 0 where there is no /proc.
func writtenBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
