package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"homework/engine/agentcmd"
	"homework/engine/waitfor"
)

// readPids waits for the line a fake program writes to its named pipe and
// returns the pids on it.
func readPids(t *testing.T, wait func() string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Fields(wait()) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("not a pid: %q", f)
		}
		out = append(out, pid)
	}
	return out
}

// TestWhatAServerStartsDiesWithIt: SIGKILL the server while its command
// agent, or its command check, runs; the program and the background child
// it started are gone within a second, so the "done" marker they would
// write later is never written, and the restarted server completes the run.
func TestWhatAServerStartsDiesWithIt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	// slow writes the pids of the program and of its background child to
	// the pipe, and the marker after 3 s (then only on a second run).
	slow := func(root, marker, pipe string) string {
		return `if [ ! -e ` + filepath.Join(root, "again") + ` ]; then
  touch ` + filepath.Join(root, "again") + `
  ( sleep 3; echo done > ` + marker + ` ) &
  echo "$$ $!" > ` + pipe + `
  wait
fi`
	}
	for _, where := range []string{"agent", "check"} {
		t.Run("during a slow "+where, func(t *testing.T) {
			root := t.TempDir()
			wd := filepath.Join(root, "work")
			if err := os.Mkdir(wd, 0o755); err != nil {
				t.Fatal(err)
			}
			marker, pipe := filepath.Join(root, where+"-done"), filepath.Join(root, "pids")
			started := waitfor.Pipe(t, pipe, 30*time.Second)
			agent := []string{"sh", "-c", "echo '<promise>COMPLETE</promise>'"}
			check := []string{"true"}
			if where == "agent" {
				agent = []string{"sh", "-c", slow(root, marker, pipe) + "\necho '<promise>COMPLETE</promise>'"}
			} else {
				check = []string{"sh", "-c", slow(root, marker, pipe)}
			}
			dbPath := filepath.Join(t.TempDir(), "dies.db")
			first := startServer(t, bin, dbPath, "--allow-command-runs", root)
			token := adminToken(t, bin, dbPath)
			id := first.createRun(t, token, map[string]any{
				"objective": "die with the server", "executor": "command",
				"agent": map[string]any{"workdir": wd, "argv": agent},
				"completion": map[string]any{"checks": []map[string]any{{"type": "command", "name": "check",
					"argv": check, "timeout_ms": 60000}}},
			})
			pids := readPids(t, started)
			t.Cleanup(func() {
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			first.kill()
			for _, pid := range pids {
				if !waitfor.Gone(pid, time.Second) {
					t.Fatalf("the %s's process %d outlived its server by more than a second", where, pid)
				}
			}
			// Every process that could write it is gone.
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the %s wrote its done marker after its server died", where)
			}
			second := startServer(t, bin, dbPath, "--allow-command-runs", root)
			waitRunStatus(t, second, token, id, "completed")
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the %s of the killed server wrote its done marker", where)
			}
		})
	}
}

// TestARecordedOrphanGroupIsKilledBeforeTheNextAgent is the second line of
// defense: a process group an earlier attempt recorded in the work
// directory (one that escaped its supervisor) is killed, and waited for,
// before the next attempt's agent starts, so the two never overlap.
func TestARecordedOrphanGroupIsKilledBeforeTheNextAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	wd := filepath.Join(root, "work")
	if err := os.MkdirAll(filepath.Join(wd, ".homework"), 0o755); err != nil {
		t.Fatal(err)
	}
	agentLog := filepath.Join(root, "agent.log")
	// The orphan: a group of our own that writes until it is killed.
	orphan := exec.Command("sh", "-c", `while true; do echo A-tick >> `+agentLog+`; sleep 0.05; done`)
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := orphan.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL); orphan.Wait() })
	exited := make(chan struct{})
	go func() { orphan.Wait(); close(exited) }()
	if err := os.WriteFile(filepath.Join(wd, agentcmd.GroupFile), []byte(fmt.Sprintf("%d 0\n", pgid)), 0o644); err != nil {
		t.Fatal(err)
	}

	dbPath := filepath.Join(t.TempDir(), "orphan.db")
	s := startServer(t, bin, dbPath, "--allow-command-runs", root)
	token := adminToken(t, bin, dbPath)
	id := s.createRun(t, token, map[string]any{
		"objective": "no overlap with an orphan", "executor": "command",
		"agent": map[string]any{"workdir": wd, "argv": []string{"sh", "-c",
			`echo B-start >> ` + agentLog + `; sleep 0.3; echo B-end >> ` + agentLog + `; echo '<promise>COMPLETE</promise>'`}},
	})
	waitRunStatus(t, s, token, id, "completed")
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded orphan group was not killed")
	}
	b, _ := os.ReadFile(agentLog)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	bStart := -1
	for i, l := range lines {
		if l == "B-start" {
			bStart = i
		}
	}
	if bStart < 0 {
		t.Fatalf("the agent never ran:\n%s", b)
	}
	for _, l := range lines[bStart:] {
		if strings.HasPrefix(l, "A-") {
			t.Fatalf("the orphan wrote after the agent started:\n%s", b)
		}
	}
	evs := runEvents(t, s, token, id)
	if !strings.Contains(eventTypes(evs), "agent_orphan_killed") {
		t.Fatalf("no agent_orphan_killed event: %s", eventTypes(evs))
	}
}

// TestAPausedServerKeepsItsAttempt: a lone server stopped (SIGSTOP) for
// three times its lease while its agent works, then continued, does not
// recover its own live run: the agent is held still while the lease is
// overdue and goes on afterwards, started once, and the run completes.
func TestAPausedServerKeepsItsAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	wd := filepath.Join(root, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	agentLog, pipe := filepath.Join(root, "agent.log"), filepath.Join(root, "started")
	started := waitfor.Pipe(t, pipe, 30*time.Second)
	dbPath := filepath.Join(t.TempDir(), "pause.db")
	const lease = time.Second
	s := startServer(t, bin, dbPath, "--lease-ttl", lease.String(), "--allow-command-runs", root)
	token := adminToken(t, bin, dbPath)
	id := s.createRun(t, token, map[string]any{
		"objective": "survive a pause", "executor": "command",
		"agent": map[string]any{"workdir": wd, "argv": []string{"sh", "-c", `echo start >> ` + agentLog + `
echo "$$" > ` + pipe + `
i=0; while [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done
echo end >> ` + agentLog + `
echo '<promise>COMPLETE</promise>'`}},
	})
	agent := readPids(t, started)[0]
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The pause itself is what this test is about: three leases long.
	time.Sleep(3 * lease)
	// Stopped by now (a process busy in the kernel, state D, stops as it
	// leaves it: look again for a moment).
	st := waitfor.ProcessState(agent)
	for deadline := time.Now().Add(2 * time.Second); st != "T" && time.Now().Before(deadline); st = waitfor.ProcessState(agent) {
		time.Sleep(10 * time.Millisecond)
	}
	if st != "T" {
		t.Errorf("the agent's state during the server's pause is %q, want T (stopped: its lease is overdue)", st)
	}
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitRunStatus(t, s, token, id, "completed")
	b, _ := os.ReadFile(agentLog)
	if got := strings.TrimSpace(string(b)); got != "start\nend" {
		t.Fatalf("the agent's log is %q, want one start and one end:\nserver log:\n%s", got, s.log())
	}
	evs := runEvents(t, s, token, id)
	if types := eventTypes(evs); strings.Contains(types, "run_recovered") || strings.Count(types, "iteration_started") != 1 {
		t.Fatalf("the paused server recovered its own run: %s", types)
	}
}
