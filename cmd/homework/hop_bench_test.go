package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procCPU returns the CPU time (user + system) process pid has used, from
// /proc/pid/stat.
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Skipf("no /proc here: %v", err)
	}
	cpu, _ := statCPU(b)
	return cpu
}

// statCPU reads the CPU time (user + system) from the contents of a
// /proc/pid/stat file, and the process's command name.
func statCPU(b []byte) (cpu time.Duration, comm string) {
	// The command name is in parentheses and may hold spaces; after it,
	// state is field 3, utime 14 and stime 15.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return 0, ""
	}
	rest := strings.Fields(string(b[end+2:]))
	if len(rest) < 13 {
		return 0, ""
	}
	utime, _ := strconv.ParseInt(rest[11], 10, 64)
	stime, _ := strconv.ParseInt(rest[12], 10, 64)
	const ticks = 100 // USER_HZ, 100 on Linux
	return time.Duration(utime+stime) * time.Second / ticks, string(b[open+1 : end])
}

// BenchmarkLoneRunHop measures a lone run of 300 instant script iterations
// on the real binary: the wall time per iteration (the run's started_at to
// completed_at) against the CPU time the server spends per iteration (from
// /proc), and prints their ratio. A ratio near 1 means the next iteration
// starts as soon as the last one committed; waiting for a poll tick shows as
// wall time without CPU (issue 29: goal ≤ 1.5).
//
//	go test ./cmd/homework -run '^$' -bench LoneRunHop -benchtime 3x
func BenchmarkLoneRunHop(b *testing.B) {
	bin, err := binary()
	if err != nil {
		b.Fatal(err)
	}
	const iterations = 300
	var steps []map[string]any
	for i := 1; i < iterations; i++ {
		steps = append(steps, map[string]any{"summary": fmt.Sprint("step ", i),
			"status": map[string]any{"progress_summary": "working", "remaining_work": []string{"more"}}})
	}
	steps = append(steps, map[string]any{"summary": "done", "status": map[string]any{"exit_signal": true, "completion_evidence": []string{"done"}}})
	b.StopTimer()
	var wallSum, cpuSum time.Duration
	for i := 0; i < b.N; i++ {
		dbPath := filepath.Join(b.TempDir(), "hop.db")
		token := userAndToken(b, bin, dbPath)
		s := startServer(b, bin, dbPath)
		pid := s.cmd.Process.Pid
		time.Sleep(500 * time.Millisecond) // let start-up settle
		cpu0 := procCPU(b, pid)
		b.StartTimer()
		id := s.createRun(b, token, map[string]any{"objective": "instant iterations", "executor": "script",
			"script": map[string]any{"steps": steps}, "budgets": map[string]any{"max_iterations": iterations + 1}})
		var run struct {
			Status      string    `json:"status"`
			StartedAt   time.Time `json:"started_at"`
			CompletedAt time.Time `json:"completed_at"`
			Metrics     struct {
				Iterations int `json:"iterations"`
			} `json:"metrics"`
		}
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if code := s.api(b, token, "GET", "/api/runs/"+id, nil, &run); code != 200 {
				b.Fatalf("run: %d", code)
			}
			if run.Status == "completed" {
				break
			}
			if run.Status != "running" && run.Status != "queued" || time.Now().After(deadline) {
				b.Fatalf("run is %s after %d iterations", run.Status, run.Metrics.Iterations)
			}
		}
		b.StopTimer()
		cpu := procCPU(b, pid) - cpu0
		if run.Metrics.Iterations != iterations {
			b.Fatalf("%d iterations, want %d", run.Metrics.Iterations, iterations)
		}
		wallSum += run.CompletedAt.Sub(run.StartedAt)
		cpuSum += cpu
		s.kill()
	}
	wall := wallSum / time.Duration(b.N*iterations)
	cpu := cpuSum / time.Duration(b.N*iterations)
	b.ReportMetric(float64(wall.Microseconds())/1000, "wall-ms/iteration")
	b.ReportMetric(float64(cpu.Microseconds())/1000, "cpu-ms/iteration")
	b.ReportMetric(float64(wall)/float64(cpu), "wall/cpu")
	b.Logf("lone run of %d instant iterations: %v wall and %v server CPU per iteration, ratio %.2f (goal ≤ 1.5)",
		iterations, wall, cpu, float64(wall)/float64(cpu))
}
