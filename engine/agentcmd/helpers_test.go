package agentcmd_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"homework/engine/agentcmd"
	"homework/engine/spec"
)

// fakeHost records Emit calls and signals each one.
type fakeHost struct {
	mu     sync.Mutex
	events []event
	signal chan struct{}
}

type event struct {
	typ  spec.EventType
	data any // the payload, of its spec type
}

func newHost() *fakeHost { return &fakeHost{signal: make(chan struct{}, 1024)} }

func (h *fakeHost) Emit(_ context.Context, typ spec.EventType, data any) error {
	h.mu.Lock()
	h.events = append(h.events, event{typ, data})
	h.mu.Unlock()
	select {
	case h.signal <- struct{}{}:
	default:
	}
	return nil
}

func (h *fakeHost) RecordLLMCall(context.Context, spec.LLMCall) error { return nil }
func (h *fakeHost) Now() time.Time                                    { return time.Now() }

func (h *fakeHost) output() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, e := range h.events {
		if e.typ == spec.EventAgentOutput {
			b.WriteString(e.data.(spec.AgentOutputData).Text)
		}
	}
	return b.String()
}

func (h *fakeHost) last(typ spec.EventType) any {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.events) - 1; i >= 0; i-- {
		if h.events[i].typ == typ {
			return h.events[i].data
		}
	}
	return nil
}

// waitOutput waits until the streamed output contains s.
func (h *fakeHost) waitOutput(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(h.output(), s) {
		select {
		case <-h.signal:
		case <-deadline:
			t.Fatalf("no output %q within 10s; got %q", s, h.output())
		}
	}
}

// setup returns an Executor whose root is a fresh directory, and a work
// directory under it.
func setup(t *testing.T, opts agentcmd.Options) (*agentcmd.Executor, string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wd := filepath.Join(root, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Root = root
	if opts.FlushInterval == 0 {
		opts.FlushInterval = 10 * time.Millisecond
	}
	return agentcmd.New(opts), wd
}

// writeScript writes an executable shell script and returns its path.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func input(runID string, iteration int, cfg *spec.Config, host spec.Host) *spec.Input {
	return &spec.Input{RunID: runID, UserID: 1, Iteration: iteration, Attempt: 1, Config: cfg, Host: host}
}

func commandConfig(argv []string, wd string) *spec.Config {
	return &spec.Config{
		Objective: "Make the tests pass.",
		Mode:      spec.ModeAuto,
		Executor:  spec.ExecutorCommand,
		Agent:     &spec.Agent{Argv: argv, Workdir: wd},
	}
}

// iterateGuard bounds every Iterate in these tests. The agents that must be
// cut short sleep 300 s, so an Iterate that waited for them ends with the
// guard's error instead of its own outcome, and the test fails on that.
const iterateGuard = 2 * time.Minute

func iterate(t *testing.T, e *agentcmd.Executor, in *spec.Input) *spec.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), iterateGuard)
	defer cancel()
	res, err := e.Iterate(ctx, in)
	if err != nil {
		t.Fatalf("Iterate: %v", err)
	}
	if res == nil {
		t.Fatal("Iterate returned no result")
	}
	return res
}

func requireGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=T", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func initRepo(t *testing.T, dir string) {
	t.Helper()
	requireGit(t)
	git(t, dir, "init", "-q")
	writeFile(t, dir, "README.md", "hello\n")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "initial")
}

func agentcmdOptions() agentcmd.Options { return agentcmd.Options{} }

// The Executor satisfies engine.Executor, engine.ConfigValidator and
// engine.GateObserver (copied here: package engine is built in parallel and
// importing it would tie these tests to its state).
var _ interface {
	Iterate(ctx context.Context, in *spec.Input) (*spec.Result, error)
	ValidateConfig(ctx context.Context, user *spec.User, cfg *spec.Config) error
	AfterGate(ctx context.Context, in *spec.Input, res *spec.Result, checks []spec.CheckResult, d spec.Decision) error
} = (*agentcmd.Executor)(nil)
