package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db/pg/pgtest"
	"homework/engine/spec"
)

// TestThreeProcessesOnPostgresSurviveASIGKILL runs three `homework serve`
// processes on one PostgreSQL database. Runs are created through the first,
// which is SIGKILLed while it works an iteration; the other two take over
// its runs once their leases expire, and every run finishes with a gap-free
// event log, each iteration recorded once and its counters adding up, read
// through another process.
func TestThreeProcessesOnPostgresSurviveASIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	url := pgtest.NewDatabase(t)
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	victim := startServer(t, bin, url, "--max-runs-per-user", "10")
	token := userAndToken(t, bin, url)
	var ids []string
	// Iterations of 600 ms: the victim is still working when the other two
	// have started, even on a loaded machine.
	for i := range 6 {
		var created struct {
			RunID string `json:"run_id"`
		}
		if code := victim.api(t, token, "POST", "/api/runs", map[string]any{
			"objective": fmt.Sprint("multi-process run ", i), "executor": "script", "script": slowScript(5, 600),
		}, &created); code != 201 || created.RunID == "" {
			t.Fatalf("create run: %d", code)
		}
		ids = append(ids, created.RunID)
	}
	// While it is alone, every lease is the victim's.
	var victimID string
	waitFor(t, "the first process to work an iteration", victim, token, func() bool {
		err := conn.QueryRow(ctx, `SELECT r.lease_owner FROM runs r JOIN iterations i ON i.run_id = r.id AND i.iteration = r.iteration
			WHERE r.status = 'running' AND i.status = 'running' AND r.lease_owner IS NOT NULL LIMIT 1`).Scan(&victimID)
		return err == nil
	})
	others := []*server{startServer(t, bin, url), startServer(t, bin, url)}
	// Kill the victim in the middle of one of its iterations.
	waitFor(t, "the first process to be mid-iteration", victim, token, func() bool {
		var n int
		conn.QueryRow(ctx, `SELECT COUNT(*) FROM runs r JOIN iterations i ON i.run_id = r.id AND i.iteration = r.iteration
			WHERE r.status = 'running' AND i.status = 'running' AND r.lease_owner = $1`, victimID).Scan(&n)
		return n > 0
	})
	victim.kill()
	killed := time.Now()
	waitFor(t, "another process to resume a run", others[0], token, func() bool {
		var n int
		conn.QueryRow(ctx, `SELECT COUNT(*) FROM events WHERE type = 'run_recovered'`).Scan(&n)
		return n > 0
	})
	t.Logf("SIGKILL to the first recovered run on another process: %s (lease TTL 3s)", time.Since(killed).Round(10*time.Millisecond))

	reader := others[1]
	interrupted := 0
	for _, id := range ids {
		waitRunStatus(t, reader, token, id, "completed")
		var page struct {
			Events []struct {
				Seq  int64           `json:"seq"`
				Type spec.EventType  `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"events"`
		}
		if code := reader.api(t, token, "GET", "/api/runs/"+id+"/events?limit=1000", nil, &page); code != 200 {
			t.Fatalf("events: %d", code)
		}
		for i, e := range page.Events {
			if e.Seq != int64(i+1) {
				t.Fatalf("run %s: event %d has seq %d (not gap-free)", id, i+1, e.Seq)
			}
			if e.Type == "iteration_completed" && strings.Contains(string(e.Data), `"interrupted"`) {
				interrupted++
			}
		}
		var run struct {
			Metrics struct {
				Iterations int   `json:"iterations"`
				Tokens     int64 `json:"tokens_total"`
			} `json:"metrics"`
			Iterations []struct {
				Iteration int    `json:"iteration"`
				Status    string `json:"status"`
				Metrics   struct {
					Iterations int   `json:"iterations"`
					Tokens     int64 `json:"tokens_total"`
				} `json:"metrics"`
			} `json:"iterations"`
		}
		if code := reader.api(t, token, "GET", "/api/runs/"+id+"?include=iterations", nil, &run); code != 200 {
			t.Fatalf("run: %d", code)
		}
		var iters int
		var tokens int64
		for i, it := range run.Iterations {
			if it.Iteration != i+1 || it.Status != "succeeded" {
				t.Fatalf("run %s: iteration row %d is iteration %d, %s", id, i, it.Iteration, it.Status)
			}
			iters += it.Metrics.Iterations
			tokens += it.Metrics.Tokens
		}
		if len(run.Iterations) != 5 || run.Metrics.Iterations != 5 || iters != 5 || run.Metrics.Tokens != tokens {
			t.Fatalf("run %s: metrics %+v do not add up over %d iterations", id, run.Metrics, len(run.Iterations))
		}
	}
	if interrupted == 0 {
		t.Fatal("no iteration was recorded as interrupted by the SIGKILL")
	}
	var workers int
	if err := conn.QueryRow(ctx, `SELECT COUNT(DISTINCT attempted_by[1]) FROM river_job WHERE kind = 'iterate'`).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if workers < 2 {
		t.Errorf("iterations were worked by %d River clients, want the queue shared by several processes", workers)
	}
}

// waitFor re-checks cond each time an event reaches the user's feed on s
// (every state change a condition here can depend on appends one), until
// it holds; the feed's guard fails t after a minute with s's log.
func waitFor(t testing.TB, what string, s *server, token string, cond func() bool) {
	t.Helper()
	if cond() {
		return
	}
	t.Logf("waiting for %s", what)
	s.feed(t, token, func(feedEvent) bool { return cond() })
}

// TestCancelAndStreamAcrossProcesses works a run in one process while a
// client streams it from another: the stream carries every event once in seq
// order, whichever process wrote it, and a cancel sent to the second
// process stops the iteration running in the first.
func TestCancelAndStreamAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	url := pgtest.NewDatabase(t)
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	// A long lease: renewal (every third of it) cannot be what stops the
	// iteration; only the delivered cancel can, well within 10 s.
	worker := startServer(t, bin, url, "--lease-ttl", "60s")
	token := userAndToken(t, bin, url)
	var created struct {
		RunID string `json:"run_id"`
	}
	// Long iterations: only a delivered cancel ends the first one soon.
	if code := worker.api(t, token, "POST", "/api/runs", map[string]any{
		"objective": "cancel me from elsewhere", "executor": "script", "script": slowScript(3, 120_000),
	}, &created); code != 201 {
		t.Fatalf("create run: %d", code)
	}
	// Only the worker process existed when the job was inserted and it
	// is working it; the second process starts now and serves the client.
	front := startServer(t, bin, url, "--lease-ttl", "60s")
	stream := front.openRunStream(t, token, created.RunID, 0)
	stream.until(t, worker, "iteration_started", isType("iteration_started"))
	var canceledAt time.Time
	if code := front.api(t, token, "POST", "/api/runs/"+created.RunID+"/cancel", nil, nil); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	canceledAt = time.Now()
	stream.until(t, worker, "run_canceled", isType("run_canceled"))
	stream.rest(t, worker) // the run stream ends after its terminal event
	// The iteration is recorded canceled with the run's end, in one commit.
	var run struct {
		Iterations []struct {
			Status string `json:"status"`
		} `json:"iterations"`
	}
	front.api(t, token, "GET", "/api/runs/"+created.RunID+"?include=iterations", nil, &run)
	if len(run.Iterations) != 1 || run.Iterations[0].Status != "canceled" {
		t.Fatalf("the iteration in the other process was not canceled: %+v\n%s", run.Iterations, worker.log())
	}
	t.Logf("cancel through one process to the iteration recorded canceled in the other: %s", time.Since(canceledAt).Round(time.Millisecond))
	for i, e := range stream.seen {
		if e.Seq != int64(i+1) {
			t.Fatalf("stream event %d has seq %d: gap or duplicate in %+v", i+1, e.Seq, stream.seen)
		}
	}
}

// BenchmarkIterationsPerSecondByProcesses works 32 script runs of eight
// 200 ms iterations (iterations that wait, as agent work does) on one
// PostgreSQL database with 1, 2 and 4 `homework serve` processes of 8
// workers each, and reports iterations per second for each beside the raw
// limit (workers × processes / 200 ms) and the scaling ratio against one
// process.
//
//	HOMEWORK_TEST_PG=... go test ./cmd/homework -run '^$' -bench IterationsPerSecondByProcesses -benchtime 1x
func BenchmarkIterationsPerSecondByProcesses(b *testing.B) {
	bin, err := binary()
	if err != nil {
		b.Fatal(err)
	}
	const runs, iters, stepMS, workers = 32, 8, 200, 8
	ctx := context.Background()
	var one float64
	for _, procs := range []int{1, 2, 4} {
		url := pgtest.NewDatabase(b)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		var servers []*server
		for range procs {
			servers = append(servers, startServer(b, bin, url, "--workers", fmt.Sprint(workers), "--max-runs-per-user", fmt.Sprint(runs)))
		}
		token := userAndToken(b, bin, url)
		pgBefore := postgresCPU()
		var serversBefore time.Duration // their start and migrations are not the work
		for _, s := range servers {
			serversBefore += procCPU(b, s.cmd.Process.Pid)
		}
		start := time.Now()
		created := createRuns(b, servers, token, runs, func(i int) any {
			return map[string]any{"objective": fmt.Sprint("bench ", i), "executor": "script", "script": slowScript(iters, stepMS)}
		})
		waitCompleted(b, servers[0], token, runs)
		elapsed := time.Since(start)
		b.ReportMetric(float64(created.Microseconds())/1000, fmt.Sprintf("create-all-ms-%dproc", procs))
		rate := float64(runs*iters) / elapsed.Seconds()
		limit := float64(workers*procs) / (stepMS / 1000.0)
		if procs == 1 {
			one = rate
		}
		b.ReportMetric(rate, fmt.Sprintf("iter/s-%dproc", procs))
		if procs > 1 {
			b.ReportMetric(rate/one, fmt.Sprintf("scaling-%dproc", procs))
		}
		// CPU per iteration, the servers' and the database's: where
		// the machine's time went, beside how long it took.
		cpu := -serversBefore
		for _, s := range servers {
			cpu += procCPU(b, s.cmd.Process.Pid)
		}
		pgCPU := cpuSince(pgBefore, postgresCPU())
		if procs == 1 && pgCPU > 0 {
			// The scaling this machine's CPUs allow at all: every core
			// busy with iterations that cost what one process's did.
			perIter := (cpu + pgCPU).Seconds() / float64(runs*iters)
			ceiling := float64(runtime.NumCPU()) / perIter / rate
			b.ReportMetric(ceiling, "cpu-ceiling-scaling")
			b.Logf("CPU per iteration with 1 process %.1f ms: %d CPUs allow at most %.0f iterations/s, %.2fx one process",
				perIter*1000, runtime.NumCPU(), float64(runtime.NumCPU())/perIter, ceiling)
		}
		if procs > 1 && pgCPU > 0 {
			// The same at what an iteration costs with procs
			// processes: the scaling the CPUs allow them.
			perIter := (cpu + pgCPU).Seconds() / float64(runs*iters)
			ceiling := float64(runtime.NumCPU()) / perIter / one
			b.ReportMetric(ceiling, fmt.Sprintf("cpu-ceiling-scaling-%dproc", procs))
			b.Logf("CPU per iteration with %d processes %.1f ms: %d CPUs allow them at most %.0f iterations/s, %.2fx one process",
				procs, perIter*1000, runtime.NumCPU(), float64(runtime.NumCPU())/perIter, ceiling)
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(runs*iters), fmt.Sprintf("server-cpu-ms/iter-%dproc", procs))
		if pgCPU > 0 { // 0: PostgreSQL runs elsewhere
			b.ReportMetric(float64(pgCPU.Microseconds())/1000/float64(runs*iters), fmt.Sprintf("pg-cpu-ms/iter-%dproc", procs))
		}
		b.Logf("%d process(es): %.1f iterations/s (raw limit %.0f, %.0f%% of it; %.2fx one process); CPU per iteration: servers %.1f ms, PostgreSQL %.1f ms",
			procs, rate, limit, 100*rate/limit, rate/one,
			float64(cpu.Microseconds())/1000/float64(runs*iters), float64(pgCPU.Microseconds())/1000/float64(runs*iters))
		for _, s := range servers {
			s.kill()
		}
		conn.Close(ctx)
	}

	// The same work on one SQLite server, for comparison.
	path := filepath.Join(b.TempDir(), "bench.db")
	s := startServer(b, bin, path, "--workers", fmt.Sprint(workers), "--max-runs-per-user", fmt.Sprint(runs))
	token := userAndToken(b, bin, path)
	start := time.Now()
	createRuns(b, []*server{s}, token, runs, func(i int) any {
		return map[string]any{"objective": fmt.Sprint("bench ", i), "executor": "script", "script": slowScript(iters, stepMS)}
	})
	waitCompleted(b, s, token, runs)
	rate := float64(runs*iters) / time.Since(start).Seconds()
	b.ReportMetric(rate, "iter/s-sqlite")
	b.Logf("SQLite, 1 process: %.1f iterations/s (raw limit %.0f; PostgreSQL 1 process is %.2fx of it)", rate,
		float64(workers)/(stepMS/1000.0), one/rate)
}

// createRuns creates n runs at once, as n clients would, run i on server
// i mod len(servers) with body(i), and returns how long it took until the
// last was created.
func createRuns(b *testing.B, servers []*server, token string, n int, body func(i int) any) time.Duration {
	start := time.Now()
	errs := make(chan error, n)
	for i := range n {
		buf, err := json.Marshal(body(i))
		if err != nil {
			b.Fatal(err)
		}
		req, err := http.NewRequest("POST", servers[i%len(servers)].base+"/api/runs", bytes.NewReader(buf))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					err = fmt.Errorf("create run %d: %d %s", i, resp.StatusCode, out)
				}
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// postgresCPU returns the CPU time each of the local PostgreSQL's
// processes has used, by pid (none when it runs elsewhere): the whole
// cluster, so the figure means this benchmark only on an otherwise idle
// server.
func postgresCPU() map[string]time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	cpu := map[string]time.Duration{}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if t, comm := statCPU(b); comm == "postgres" {
			cpu[f] = t
		}
	}
	return cpu
}

// cpuSince is what the processes in now used since before (all of it for
// those started since); a process that ended meanwhile is not counted,
// and a benchmark's pools keep their backends until it ends.
func cpuSince(before, now map[string]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range now {
		d += t - before[pid]
	}
	return d
}

// waitCompleted reads the user's feed on s until n runs have completed.
func waitCompleted(b *testing.B, s *server, token string, n int) {
	completed := 0
	s.feed(b, token, func(e feedEvent) bool {
		if e.Type == spec.EventRunCompleted {
			completed++
		}
		return completed == n
	})
}
