// Command benchtable runs the performance benchmarks of issue 29 and prints
// one table: each figure, its value, its goal and whether it meets it. Every
// figure is a ratio the benchmark measured side by side with its raw limit
// in the same run (a plain SQLite statement, a minimal SSE writer, one
// process), so the table means the same on any machine.
//
//	go run ./cmd/benchtable            # every figure (the PostgreSQL ones need HOMEWORK_TEST_PG)
//	go run ./cmd/benchtable -only hop  # figures whose name contains "hop"
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// figure is one row of the table: the benchmark that measures it and the
// metric it reports, and the goal.
type figure struct {
	name      string
	pkg       string
	bench     string
	benchtime string
	metric    string
	// atMost is true for a goal the value must not exceed, false for one
	// it must reach.
	atMost bool
	goal   float64
	// goalFor computes the goal from the metric (the PostgreSQL scaling
	// figures: 0.9 × N); nil means goal.
	goalFor func(metric string) float64
	// family marks a metric that is the prefix of several, one per
	// process count (scaling-2proc, scaling-4proc): a row each.
	family  bool
	needsPG bool
	// info marks a figure printed for what it explains, without a goal.
	info bool
}

var figures = []figure{
	{name: "hop: lone run wall ÷ server CPU per iteration (300 instant iterations, binary)", pkg: "./cmd/homework", bench: "LoneRunHop", benchtime: "3x", metric: "wall/cpu", atMost: true, goal: 1.5},
	{name: "engine: overhead per iteration ÷ raw claim+complete (SQLite)", pkg: "./engine", bench: "Iterations", benchtime: "1x", metric: "overhead-ratio", atMost: true, goal: 5},
	{name: "llm: LLM executor iteration (instant model) ÷ engine iteration", pkg: "./engine/llm", bench: "LLMIterationOverhead", benchtime: "1x", metric: "llm/engine-cost", atMost: true, goal: 1.5},
	{name: "llm: the model call alone: engine iteration + the call (go-openai, same request) ÷ engine iteration", pkg: "./engine/llm", bench: "LLMIterationOverhead", benchtime: "1x", metric: "floor-llm/engine", info: true},
	{name: "llm: the least with the call's spend kept as every executor keeps it (its own commit, engine path) ÷ engine iteration", pkg: "./engine/llm", bench: "LLMIterationOverhead", benchtime: "1x", metric: "floor-recorded-llm/engine", info: true},
	{name: "appends: event appends (256 producers) ÷ raw batched insert", pkg: "./db", bench: "EventAppends", benchtime: "20000x", metric: "vs-batched", goal: 0.8},
	{name: "replay: replay of 100k events ÷ ordered scan", pkg: "./handlers", bench: "SSEReplay", benchtime: "1x", metric: "vs-scan", goal: 0.9},
	{name: "replay: replay ÷ the scan reading as many pages at once as the replay (what the cores can read)", pkg: "./handlers", bench: "SSEReplay", benchtime: "1x", metric: "vs-scan-ahead", info: true},
	{name: "memory: per idle subscriber ÷ minimal writer", pkg: "./handlers", bench: "SSEIdleMemory", benchtime: "1x", metric: "ratio", atMost: true, goal: 1.1},
	{name: "sse: publish→receive p99, 1,000 subscribers ÷ minimal writer", pkg: "./handlers", bench: "SSEPublishLatency", benchtime: "1x", metric: "p99-ratio", atMost: true, goal: 1.0},
	{name: "stats: GET /api/stats over 10k runs ÷ plain aggregate", pkg: "./handlers", bench: "Stats", benchtime: "10x", metric: "ratio", atMost: true, goal: 2},
	{name: "page: run page watch bytes ratio", pkg: "./handlers", bench: "RunPageWatch", benchtime: "1x", metric: "bytes-ratio", atMost: true, goal: 1.1},
	{name: "pg: iterations/s, N processes ÷ 1 process (200 ms iterations, 8 workers, 32 runs × 8)", pkg: "./cmd/homework", bench: "IterationsPerSecondByProcesses", benchtime: "1x", metric: "scaling-", family: true, goalFor: pgGoal, needsPG: true},
	{name: "pg: the most scaling this machine's CPUs allow (cores ÷ CPU per iteration of 1 process ÷ its rate)", pkg: "./cmd/homework", bench: "IterationsPerSecondByProcesses", benchtime: "1x", metric: "cpu-ceiling-scaling", info: true, needsPG: true},
	{name: "pg: the most scaling the CPUs allow N processes (cores ÷ CPU per iteration of N processes ÷ 1 process's rate)", pkg: "./cmd/homework", bench: "IterationsPerSecondByProcesses", benchtime: "1x", metric: "cpu-ceiling-scaling-", family: true, info: true, needsPG: true},
	{name: "pg: engine overhead per iteration ÷ raw claim+complete (PostgreSQL)", pkg: "./engine", bench: "IterationsPostgres", benchtime: "1x", metric: "overhead-ratio", atMost: true, goal: 5, needsPG: true},
}

// pgGoal is 0.9 × N for the metric scaling-Nproc.
func pgGoal(metric string) float64 {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(metric, "scaling-"), "proc"))
	return 0.9 * float64(n)
}

func main() {
	only := flag.String("only", "", "run only the figures whose name contains this")
	flag.Parse()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "figure\tvalue\tgoal\tresult\n")
	failed := false
	for _, f := range figures {
		if *only != "" && !strings.Contains(f.name, *only) {
			continue
		}
		if f.needsPG && os.Getenv("HOMEWORK_TEST_PG") == "" {
			fmt.Fprintf(w, "%s\t-\t-\tskipped (HOMEWORK_TEST_PG not set)\n", f.name)
			continue
		}
		fmt.Fprintf(os.Stderr, "%s ...\n", f.name)
		metrics, out, err := runOnce(f)
		if err != nil {
			fmt.Fprintf(w, "%s\t-\t-\tERROR %v\n", f.name, err)
			fmt.Fprintln(os.Stderr, out)
			failed = true
			continue
		}
		found := false
		for _, m := range slices.Sorted(maps.Keys(metrics)) {
			if !(m == f.metric || f.family && strings.HasPrefix(m, f.metric)) {
				continue
			}
			found = true
			goal := f.goal
			if f.goalFor != nil {
				goal = f.goalFor(m)
			}
			v := metrics[m]
			name := f.name
			if m != f.metric {
				name += " (" + m + ")"
			}
			if f.info {
				fmt.Fprintf(w, "%s\t%.4g\t-\tinfo\n", name, v)
				continue
			}
			ok := v >= goal
			cmp := "≥"
			if f.atMost {
				ok, cmp = v <= goal, "≤"
			}
			result := "pass"
			if !ok {
				result, failed = "FAIL", true
			}
			fmt.Fprintf(w, "%s\t%.4g\t%s %g\t%s\n", name, v, cmp, goal, result)
		}
		switch {
		case !found && f.info:
			fmt.Fprintf(w, "%s\t-\t-\tinfo: not measured here\n", f.name)
		case !found:
			fmt.Fprintf(w, "%s\t-\t-\tERROR no metric %q\n", f.name, f.metric)
			failed = true
		}
	}
	w.Flush()
	fmt.Printf("\n%s/%s, %d CPUs, %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel())
	if failed {
		os.Exit(1)
	}
}

// results keeps each benchmark's result for the figures that share it.
var results = map[string]benchResult{}

type benchResult struct {
	metrics map[string]float64
	out     string
	err     error
}

// runOnce is run, once per benchmark however many figures read it.
func runOnce(f figure) (map[string]float64, string, error) {
	key := f.pkg + " " + f.bench + " " + f.benchtime
	r, ok := results[key]
	if !ok {
		r.metrics, r.out, r.err = run(f)
		results[key] = r
	}
	return r.metrics, r.out, r.err
}

// run runs one benchmark and returns the metrics of its result line.
func run(f figure) (map[string]float64, string, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^Benchmark"+f.bench+"$", "-benchtime", f.benchtime, "-timeout", "30m", f.pkg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, out.String(), err
	}
	metrics := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark"+f.bench) {
			continue
		}
		// name, N, then value-unit pairs.
		for i := 2; i+1 < len(fields); i += 2 {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				metrics[fields[i+1]] = v
			}
		}
	}
	return metrics, out.String(), nil
}

// cpuModel is the machine's CPU model name, from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
