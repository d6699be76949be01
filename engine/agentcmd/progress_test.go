package agentcmd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/engine/agentcmd"
	"homework/engine/spec"
)

func fixedClock() func() time.Time {
	return func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
}

func TestAfterGateWritesProgressAtomically(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{Now: fixedClock()})
	cfg := commandConfig([]string{"true"}, wd)
	res := &spec.Result{Summary: "Fixed Add.\n<promise>COMPLETE</promise>", Error: "The agent failed (exit status 1).", ErrorFingerprint: "exit-1:abc",
		Promise: &spec.Promise{Kind: spec.PromiseComplete, Reason: "all good"}}
	results := []spec.CheckResult{{Name: "tests", Passed: false}, {Name: "lint", Passed: true}, {Name: "prd", Errored: true}}
	d := spec.Decision{Decision: spec.DecisionContinue, Reasons: []string{"completion claimed but checks fail"}, FalseCompletion: true}
	for i := 1; i <= 2; i++ {
		if err := e.AfterGate(context.Background(), input("r", i, cfg, nil), res, results, d); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(wd, ".homework", "progress.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"# Homework progress log",
		"## Iteration 1 (2026-01-02 03:04:05Z)\nOutcome: error\nError: The agent failed (exit status 1).\nPromise: COMPLETE — all good\n",
		"Summary: Fixed Add. [promise]COMPLETE[/promise]\n",
		"Checks: 1/3 passed; failing: tests, prd (error)\n",
		"Decision: continue — completion claimed but checks fail\n",
		"## Iteration 2 (",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("progress.txt lacks %q:\n%s", want, got)
		}
	}
	entries, err := os.ReadDir(filepath.Join(wd, ".homework"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "progress.txt" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf(".homework holds %v, want only progress.txt (no temporary files)", names)
	}
}

// TestAfterGateNeverShowsAPartialProgressFile reads progress.txt while it is
// rewritten again and again: every read must be a whole file, the header
// first and a finished entry last. A writer that truncates and rewrites in
// place fails this.
func TestAfterGateNeverShowsAPartialProgressFile(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{Now: fixedClock()})
	cfg := commandConfig([]string{"true"}, wd)
	name := filepath.Join(wd, ".homework", "progress.txt")
	d := spec.Decision{Decision: spec.DecisionContinue, Reasons: []string{"more to do"}}
	if err := e.AfterGate(context.Background(), input("r", 1, cfg, nil), &spec.Result{Summary: "first"}, nil, d); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	reads := make(chan int)
	go func() {
		n := 0
		defer func() { reads <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(name)
			if err != nil {
				t.Errorf("read %d: %v", n, err)
				return
			}
			s := string(b)
			if !strings.HasPrefix(s, "# Homework progress log") || !strings.HasSuffix(s, "Decision: continue — more to do\n") {
				t.Errorf("read %d saw a partial file (%d bytes): ...%q", n, len(s), s[max(0, len(s)-80):])
				return
			}
			n++
		}
	}()
	// Large entries make a non-atomic write take long enough to be seen.
	big := strings.Repeat("a long summary line of work done. ", 2000)
	for i := 2; i <= 60; i++ {
		if err := e.AfterGate(context.Background(), input("r", i, cfg, nil), &spec.Result{Summary: big}, nil, d); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if n := <-reads; n == 0 && !t.Failed() {
		t.Fatal("the reader never read the file")
	}
}

func TestAfterGateProgressIsBounded(t *testing.T) {
	const maxBytes, maxEntries = 8 << 10, 10
	e, wd := setup(t, agentcmd.Options{Now: fixedClock(), ProgressMaxBytes: maxBytes, ProgressMaxEntries: maxEntries})
	cfg := commandConfig([]string{"true"}, wd)
	name := filepath.Join(wd, ".homework", "progress.txt")
	decisions := []string{spec.DecisionContinue, spec.DecisionContinue, spec.DecisionWait}
	const n = 200
	for i := 1; i <= n; i++ {
		res := &spec.Result{Summary: strings.Repeat(fmt.Sprintf("work of iteration %d. ", i), 10)}
		d := spec.Decision{Decision: decisions[i%3], Reasons: []string{"more to do"}}
		if err := e.AfterGate(context.Background(), input("r", i, cfg, nil), res, nil, d); err != nil {
			t.Fatal(err)
		}
		if i == 50 {
			// The agent writes its own note in between.
			f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(f, "\n## Agent notes\nRemember the flaky test.\n")
			f.Close()
		}
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > maxBytes {
			t.Fatalf("after %d entries progress.txt is %d bytes, bound %d", i, fi.Size(), maxBytes)
		}
	}
	b, _ := os.ReadFile(name)
	got := string(b)
	if c := strings.Count(got, "\n## Iteration "); c > maxEntries || c == 0 {
		t.Fatalf("%d entries kept, bound %d", c, maxEntries)
	}
	if !strings.Contains(got, fmt.Sprintf("## Iteration %d (", n)) {
		t.Fatal("the newest entry is missing")
	}
	kept := strings.Count(got, "\n## Iteration ")
	folded := n - kept
	for _, want := range []string{
		"## Summary of earlier iterations",
		fmt.Sprintf("%d earlier iteration entries (iterations 1 to %d)", folded, folded),
		fmt.Sprintf("Tally: entries=%d first=1 last=%d notes=1 ", folded, folded),
		"1 other notes were dropped.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("progress.txt lacks %q:\n%s", want, got[:min(len(got), 1500)])
		}
	}
	// The tallies add up.
	var cont, wait int
	for i := 1; i <= folded; i++ {
		if i%3 == 0 {
			wait++
		} else {
			cont++
		}
	}
	if want := fmt.Sprintf("Decisions: continue %d, wait %d.", cont, wait); !strings.Contains(got, want) {
		t.Errorf("progress.txt lacks %q", want)
	}
}

func TestAfterGateCommitEach(t *testing.T) {
	requireGit(t)
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit_each_iteration=%v", on), func(t *testing.T) {
			e, wd := setup(t, agentcmd.Options{})
			initRepo(t, wd)
			agent := writeScript(t, t.TempDir(), "agent.sh", `cat >/dev/null; echo "line $HOMEWORK_ITERATION" >> notes.txt`)
			cfg := commandConfig([]string{agent}, wd)
			cfg.Agent.CommitEach = on
			in := input("run-7", 1, cfg, newHost())
			res := iterate(t, e, in)
			if err := e.AfterGate(context.Background(), in, res, nil, spec.Decision{Decision: spec.DecisionContinue}); err != nil {
				t.Fatal(err)
			}
			log := git(t, wd, "log", "--format=%s|%an")
			committed := strings.Contains(log, "homework: run run-7 iteration 1|Homework")
			if committed != on {
				t.Fatalf("committed = %v, want %v; log:\n%s", committed, on, log)
			}
			if on {
				if s := git(t, wd, "status", "--porcelain"); s != "" {
					t.Fatalf("changes left after the commit:\n%s", s)
				}
				// An iteration that changes nothing (outside .homework) commits nothing.
				in2 := input("run-7", 2, commandConfig([]string{"true"}, wd), newHost())
				in2.Config.Agent.CommitEach = true
				res2 := iterate(t, e, in2)
				if err := e.AfterGate(context.Background(), in2, res2, nil, spec.Decision{Decision: spec.DecisionContinue}); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(git(t, wd, "log", "--format=%s"), "iteration 2") {
					t.Fatal("an iteration without changes was committed")
				}
			}
		})
	}
}

func TestDiffHash(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, e *agentcmd.Executor, wd string) {
		t.Helper()
		h := func() string {
			t.Helper()
			s, err := e.DiffHash(ctx, wd)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		h0 := h()
		if h0 != h() {
			t.Fatal("the hash is not stable")
		}
		writeFile(t, wd, ".homework/progress.txt", "our own memory")
		if h() != h0 {
			t.Fatal(".homework changed the hash")
		}
		writeFile(t, wd, "README.md", "changed\n")
		h1 := h()
		if h1 == h0 {
			t.Fatal("a modified file did not change the hash")
		}
		writeFile(t, wd, "new.bin", "\x00\x01binary")
		h2 := h()
		if h2 == h1 {
			t.Fatal("a new file did not change the hash")
		}
		writeFile(t, wd, "new.bin", "\x00\x02binary")
		if h() == h2 {
			t.Fatal("a changed new file did not change the hash")
		}
	}
	t.Run("in a git repository", func(t *testing.T) {
		e, wd := setup(t, agentcmd.Options{})
		initRepo(t, wd)
		writeFile(t, wd, ".gitignore", "ignored/\n")
		git(t, wd, "add", "-A")
		git(t, wd, "commit", "-q", "-m", "ignore")
		check(t, e, wd)
		h, _ := e.DiffHash(ctx, wd)
		writeFile(t, wd, "ignored/x", "ignored")
		if h2, _ := e.DiffHash(ctx, wd); h2 != h {
			t.Fatal("an ignored file changed the hash")
		}
	})
	t.Run("in a plain directory", func(t *testing.T) {
		e, wd := setup(t, agentcmd.Options{})
		writeFile(t, wd, "README.md", "hello\n")
		check(t, e, wd)
	})
}

func TestOutputHashIgnoresTimestamps(t *testing.T) {
	a := agentcmd.OutputHash("2026-01-02T03:04:05Z ok took 1.5s at 0xc000123\n")
	b := agentcmd.OutputHash("2027-11-12T13:14:15Z ok took 0.2s at 0xc999999  \r\n")
	if a != b {
		t.Fatal("outputs differing in timestamps and durations hash differently")
	}
	if a == agentcmd.OutputHash("2026-01-02T03:04:05Z FAIL took 1.5s") {
		t.Fatal("different outputs hash the same")
	}
}
