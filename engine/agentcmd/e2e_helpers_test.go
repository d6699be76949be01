package agentcmd_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"homework/db"
	"homework/db/bind"
	"homework/engine"
	"homework/engine/agentcmd"
	"homework/engine/spec"
	"homework/engine/waitfor"
)

// e2e is a real engine over a real SQLite file with the real command
// executor, whose root is a fresh temporary directory.
type e2e struct {
	t     *testing.T
	ctx   context.Context
	db    *db.DB
	bus   *engine.Bus
	eng   *engine.Engine
	x     *agentcmd.Executor
	root  string
	admin *spec.User

	stopOnce *sync.Once
}

// e2eConfig tunes newE2E.
type e2eConfig struct {
	// exec is the executor's options; Root defaults to a fresh directory
	// (set noRoot to leave it empty).
	exec   agentcmd.Options
	noRoot bool
	// noCommandExecutor builds the engine without the command executor.
	noCommandExecutor bool
	// commandRunsForbidden builds the engine with CommandRunsAllowed false.
	commandRunsForbidden bool
}

func newE2E(t *testing.T, c e2eConfig) *e2e {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts := c.exec
	if !c.noRoot {
		opts.Root = root
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = 10 * time.Millisecond
	}
	if opts.KillGrace == 0 {
		opts.KillGrace = 200 * time.Millisecond
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = agentLookupEnv(t)
	}
	x := agentcmd.New(opts)

	bus := engine.NewBus()
	d, err := db.Open(ctx, db.Options{Path: filepath.Join(t.TempDir(), "h.db"), OnEvents: bus.Publish})
	if err != nil {
		t.Fatal(err)
	}
	executors := map[string]engine.Executor{spec.ExecutorCommand: x}
	if c.noCommandExecutor {
		executors = map[string]engine.Executor{}
	}
	eng, err := engine.New(engine.Options{Backend: bind.SQLite(d), Bus: bus, Executors: executors, CommandRunsAllowed: !c.commandRunsForbidden,
		Workers: 4, FetchPollInterval: 20 * time.Millisecond, ShutdownGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := &e2e{t: t, ctx: ctx, db: d, bus: bus, eng: eng, x: x, root: root, stopOnce: new(sync.Once)}
	t.Cleanup(func() {
		h.stop()
		d.Close()
	})
	h.admin, err = d.CreateUser(ctx, "admin@example.com", "x", true)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// in returns h for use by the subtest t: a harness shared by several
// subtests must fail the one that uses it.
func (h *e2e) in(t *testing.T) *e2e {
	c := *h
	c.t = t
	return &c
}

// stop stops the engine and waits for its workers, so that everything an
// iteration does after committing its outcome (the progress entry) is done.
func (h *e2e) stop() {
	h.stopOnce.Do(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := h.eng.Stop(sctx); err != nil {
			h.t.Errorf("stop engine: %v", err)
		}
	})
}

// workdir creates a work directory under the root.
func (h *e2e) workdir(name string) string {
	h.t.Helper()
	wd := filepath.Join(h.root, name)
	if err := os.MkdirAll(wd, 0o755); err != nil {
		h.t.Fatal(err)
	}
	return wd
}

// agent writes a bash agent script into its own temporary directory (not
// the work directory) and returns the script's path and that directory, which
// the script can use for state the work directory should not see.
func agent(t *testing.T, body string) (script, state string) {
	t.Helper()
	state = t.TempDir()
	script = filepath.Join(state, "agent.sh")
	if err := os.WriteFile(script, []byte("set -u\nSTATE="+shellQuote(state)+"\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, state
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// commandRun returns a command run's configuration around a bash script.
func commandRun(script, wd string, checks ...spec.CheckSpec) spec.Config {
	return spec.Config{
		Objective:  "Make the work directory pass its checks.",
		Executor:   spec.ExecutorCommand,
		Agent:      &spec.Agent{Argv: []string{"bash", script}, Workdir: wd, TimeoutMS: 30_000},
		Completion: spec.Completion{Checks: checks},
		Budgets:    spec.Budgets{MaxIterations: 10},
	}
}

func (h *e2e) create(cfg spec.Config) *spec.Run {
	h.t.Helper()
	r, err := h.eng.CreateRun(h.ctx, h.admin, cfg)
	if err != nil {
		h.t.Fatalf("create run: %v", err)
	}
	return r
}

func (h *e2e) run(id string) *spec.Run {
	h.t.Helper()
	r, err := h.db.FindRun(h.ctx, h.admin.ID, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// waitFor waits, on the run's event stream, until cond holds for the run.
// When it times out, the run's events are logged.
func (h *e2e) waitFor(runID, what string, cond func(*spec.Run) bool) *spec.Run {
	h.t.Helper()
	var done bool
	h.t.Cleanup(func() {
		if !done {
			h.t.Logf("events of run %s:\n%s", runID, h.eventDump(runID))
		}
	})
	subscribe := func() (<-chan *spec.Event, func()) { s := h.bus.SubscribeRun(runID, 1024); return s.C, s.Close }
	r := waitfor.Run(h.t, what, 60*time.Second, subscribe, func() (*spec.Run, error) { return h.run(runID), nil }, cond)
	done = true
	return r
}

// settled waits until the run is neither queued nor running: an iteration
// ended it, stopped it or made it wait.
func (h *e2e) settled(runID string) *spec.Run {
	h.t.Helper()
	return h.waitFor(runID, "the run to settle", func(r *spec.Run) bool {
		return r.Status != spec.StatusRunning && r.Status != spec.StatusQueued
	})
}

// waitEvent waits until the run has an event for which match holds and
// returns it.
func (h *e2e) waitEvent(runID, what string, match func(*spec.Event) bool) *spec.Event {
	h.t.Helper()
	var found *spec.Event
	h.waitFor(runID, what, func(*spec.Run) bool {
		for _, e := range h.rawEvents(runID) {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

func (h *e2e) rawEvents(runID string) []*spec.Event {
	h.t.Helper()
	evs, err := h.db.ListRunEvents(h.ctx, h.admin.ID, runID, 0, 100000)
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// events returns all the run's events and checks that seq is gap-free.
func (h *e2e) events(runID string) []*spec.Event {
	h.t.Helper()
	evs := h.rawEvents(runID)
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			h.t.Fatalf("event %d has seq %d: not gap-free", i+1, e.Seq)
		}
	}
	return evs
}

func (h *e2e) eventDump(runID string) string {
	var b strings.Builder
	for _, e := range h.rawEvents(runID) {
		data := string(e.Data)
		if len(data) > 400 {
			data = data[:400] + "…"
		}
		b.WriteString(strconv.FormatInt(e.Seq, 10) + " " + string(e.Type) + " " + data + "\n")
	}
	return b.String()
}

func (h *e2e) iterations(runID string) []*spec.Iteration {
	h.t.Helper()
	its, err := h.db.ListIterations(h.ctx, h.admin.ID, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	return its
}

// notifications returns the admin's notifications about the run, oldest
// first.
func (h *e2e) notifications(runID string) []*spec.Notification {
	h.t.Helper()
	all, err := h.db.ListNotifications(h.ctx, h.admin.ID, 0, 200)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*spec.Notification
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].RunID == runID {
			out = append(out, all[i])
		}
	}
	return out
}

func ofType(evs []*spec.Event, typ spec.EventType) []*spec.Event {
	var out []*spec.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func decode[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

func gateOf(t *testing.T, it *spec.Iteration) spec.GateRecord {
	t.Helper()
	return decode[spec.GateRecord](t, it.Gate)
}

func checksOf(t *testing.T, it *spec.Iteration) []spec.CheckResult {
	t.Helper()
	return decode[[]spec.CheckResult](t, it.Checks)
}

// checkResultEvent is a check_result event's data.
type checkResultEvent struct {
	Iteration int              `json:"iteration"`
	Check     spec.CheckResult `json:"check"`
}

// gateEvent is a gate_decision event's data.
type gateEvent struct {
	Iteration       int      `json:"iteration"`
	Decision        string   `json:"decision"`
	Reasons         []string `json:"reasons"`
	StopReason      string   `json:"stop_reason"`
	WaitReason      string   `json:"wait_reason"`
	Questions       []string `json:"questions"`
	FalseCompletion bool     `json:"false_completion"`
}

// outputEvent is an agent_output event's data.
type outputEvent struct {
	Iteration int    `json:"iteration"`
	Seq       int    `json:"seq"`
	Text      string `json:"text"`
	Truncated bool   `json:"truncated"`
}

// exitEvent is an agent_exit event's data.
type exitEvent struct {
	Iteration    int    `json:"iteration"`
	Status       string `json:"status"`
	ExitCode     int    `json:"exit_code"`
	TimedOut     bool   `json:"timed_out"`
	OutputBytes  int64  `json:"output_bytes"`
	DroppedBytes int64  `json:"dropped_bytes"`
}

// agentOutput returns the streamed agent output of one iteration.
func agentOutput(t *testing.T, evs []*spec.Event, iteration int) string {
	t.Helper()
	var b strings.Builder
	for _, e := range ofType(evs, spec.EventAgentOutput) {
		if o := decode[outputEvent](t, e.Data); o.Iteration == iteration {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

// requireBasics asserts what every finished command run has: gap-free
// events, one gate_decision and one iteration_completed per iteration, run
// metrics that add up, and no iteration left running.
func (h *e2e) requireBasics(runID string) []*spec.Event {
	h.t.Helper()
	evs := h.events(runID)
	its := h.iterations(runID)
	run := h.run(runID)
	if got := len(ofType(evs, "iteration_completed")); got != len(its) {
		h.t.Errorf("%d iteration_completed events for %d iterations", got, len(its))
	}
	var sum spec.Metrics
	for _, it := range its {
		if it.Status == spec.IterRunning {
			h.t.Errorf("iteration %d is still running", it.Iteration)
		}
		sum.Add(it.Metrics)
	}
	if run.Metrics.Iterations != sum.Iterations || run.Metrics.FalseCompletionsBlocked != sum.FalseCompletionsBlocked ||
		run.Metrics.ToolCallsTotal != sum.ToolCallsTotal {
		h.t.Errorf("run metrics %+v do not add up to the iterations' %+v", run.Metrics, sum)
	}
	if run.Metrics.Iterations != len(its) {
		h.t.Errorf("metrics count %d iterations, there are %d rows", run.Metrics.Iterations, len(its))
	}
	return evs
}

// agentEnv is the server environment the agents (and so the command checks)
// see: PATH leads to the go that runs these tests, and the Go variables
// point at its caches with no network and no toolchain switch.
var (
	agentEnvOnce sync.Once
	agentEnvVars map[string]string
	agentEnvErr  error
)

func agentLookupEnv(t *testing.T) func(string) (string, bool) {
	t.Helper()
	agentEnvOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		vars := map[string]string{"GOFLAGS": "-buildvcs=false -mod=mod", "GOTOOLCHAIN": "local", "GOPROXY": "off"}
		path := filepath.Dir(goBin)
		if p := os.Getenv("PATH"); p != "" {
			path += string(filepath.ListSeparator) + p
		}
		vars["PATH"] = path
		out, err := exec.Command(goBin, "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
		if err != nil {
			agentEnvErr = err
			agentEnvVars = vars
			return
		}
		var m map[string]string
		agentEnvErr = json.Unmarshal(out, &m)
		for k, v := range m {
			vars[k] = v
		}
		agentEnvVars = vars
	})
	if agentEnvErr != nil {
		t.Logf("go env: %v (Go checks may not work)", agentEnvErr)
	}
	return func(name string) (string, bool) {
		if v, ok := agentEnvVars[name]; ok {
			return v, true
		}
		return os.LookupEnv(name)
	}
}

// goEnvNames are the variables a Go agent and its go test check need.
var goEnvNames = []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY"}

// fileWithin waits up to d for a non-empty file, polling: a file an agent
// or check writes has no event to wait on.
func fileWithin(name string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if fi, err := os.Stat(name); err == nil && fi.Size() > 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// killIfAlive cleans up after a failed test so no sleeper outlives it.
func killIfAlive(pid int) {
	if !waitfor.ProcessGone(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
