package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"homework/db/pg/pgtest"
	"homework/engine/agentcmd"
)

// TestCommandRunStaysOnItsHost runs two `homework serve` processes on one
// PostgreSQL database, one with --allow-command-runs ROOT (host "machine-a")
// and one without. A command run created through the first runs every
// iteration there, through that host's own job queue. When that process is
// SIGKILLed, the run does not move to the other process: it waits with reason
// host_unavailable naming the host and root. When a process of that host
// starts again, the run resumes by itself there and completes.
func TestCommandRunStaysOnItsHost(t *testing.T) {
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
	root := t.TempDir()
	wd := filepath.Join(root, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	agentLog, finish := filepath.Join(root, "agent.log"), filepath.Join(root, "finish")
	// Each iteration logs the pid of the server that started it (the
	// parent of its supervisor, $PPID), changes the work directory
	// (progress) and takes a moment, until the finish marker exists.
	script := `read -r _ _ _ server _ < /proc/$PPID/stat
echo "$server $HOMEWORK_ITERATION" >> ` + agentLog + `
echo "$HOMEWORK_ITERATION" > iter-$HOMEWORK_ITERATION.txt
if [ -e ` + finish + ` ]; then echo 'all done <promise>COMPLETE</promise>'; exit 0; fi
sleep 0.4
echo "wrote iteration $HOMEWORK_ITERATION"`
	hostArgs := []string{"--allow-command-runs", root, "--host-id", "machine-a", "--max-runs-per-user", "5"}
	allowed := startServer(t, bin, url, hostArgs...)
	other := startServer(t, bin, url, "--max-runs-per-user", "5")
	token := adminToken(t, bin, url)

	body := map[string]any{
		"objective": "stay on machine-a", "executor": "command",
		"agent":   map[string]any{"workdir": wd, "argv": []string{"sh", "-c", script}},
		"budgets": map[string]any{"max_iterations": 200},
	}
	if code := other.api(t, token, "POST", "/api/runs", body, nil); code != 503 {
		t.Fatalf("creating a command run through the process without a command-run root: %d, want 503", code)
	}
	var created struct {
		RunID string `json:"run_id"`
	}
	if code := allowed.api(t, token, "POST", "/api/runs", body, &created); code != 201 {
		t.Fatalf("create command run: %d", code)
	}
	id := created.RunID
	pids := func() map[int]int {
		b, _ := os.ReadFile(agentLog)
		out := map[int]int{}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(l); len(f) == 2 {
				pid, _ := strconv.Atoi(f[0])
				out[pid]++
			}
		}
		return out
	}
	waitFor(t, "three iterations on the allowed process", allowed, token, func() bool { return pids()[allowed.cmd.Process.Pid] >= 3 })
	if p := pids(); len(p) != 1 {
		t.Fatalf("iterations ran under server pids %v; want only the allowed process %d", p, allowed.cmd.Process.Pid)
	}
	var queues []string
	rows, err := conn.Query(ctx, `SELECT DISTINCT queue FROM river_job WHERE kind = 'iterate' AND args ->> 'run_id' = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q string
		rows.Scan(&q)
		queues = append(queues, q)
	}
	rows.Close()
	if len(queues) != 1 || !strings.HasPrefix(queues[0], "cmd_") {
		t.Fatalf("the run's jobs are in queues %v, want only its host's command queue", queues)
	}

	// Kill the host's only process: the run waits for it.
	allowed.kill()
	t.Cleanup(func() { // an agent the kill orphaned
		if pid := orphanAgent(wd); pid > 0 {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	var run struct {
		Status  string `json:"status"`
		Waiting *struct {
			Reason string `json:"reason"`
			Detail string `json:"detail"`
		} `json:"waiting"`
	}
	waitFor(t, "the run to wait for its host", other, token, func() bool {
		other.api(t, token, "GET", "/api/runs/"+id, nil, &run)
		return run.Status == "waiting_on_user"
	})
	if run.Waiting == nil || run.Waiting.Reason != "host_unavailable" ||
		!strings.Contains(run.Waiting.Detail, `"machine-a"`) || !strings.Contains(run.Waiting.Detail, root) {
		t.Fatalf("waiting %+v: want reason host_unavailable naming host machine-a and root %s", run.Waiting, root)
	}
	before := pids()
	evs := runEvents(t, other, token, id)
	if types := eventTypes(evs); strings.Contains(types, "run_recovered") || strings.Contains(types, "run_failed") {
		t.Fatalf("the run was recovered or failed elsewhere instead of waiting: %s", types)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM river_job WHERE kind = 'iterate' AND args ->> 'run_id' = $1
		AND state IN ('available', 'scheduled', 'retryable', 'pending')`, id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs of the waiting run are still to be worked (%v)", n, err)
	}

	// A process of that host again: the run resumes there by itself.
	if err := os.WriteFile(finish, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	again := startServer(t, bin, url, hostArgs...)
	waitRunStatus(t, other, token, id, "completed")
	after := pids()
	for pid, k := range after {
		if pid != again.cmd.Process.Pid && k != before[pid] {
			t.Fatalf("iterations ran under server pid %d after the restart; want only the restarted process %d: %v",
				pid, again.cmd.Process.Pid, after)
		}
	}
	if after[again.cmd.Process.Pid] == 0 {
		t.Fatalf("the restarted process ran no iteration: %v", after)
	}
	types := eventTypes(runEvents(t, other, token, id))
	if !strings.Contains(types, "run_waiting_on_user") || !strings.HasSuffix(types, "run_completed") {
		t.Fatalf("events: %s", types)
	}
	t.Logf("iterations by server pid: %v (first %d, restarted %d); events: %s", after, allowed.cmd.Process.Pid, again.cmd.Process.Pid, types)
}

// orphanAgent returns the process group the command executor recorded for
// an agent still running in wd, or 0.
func orphanAgent(wd string) int {
	b, err := os.ReadFile(filepath.Join(wd, agentcmd.GroupFile))
	if err != nil {
		return 0
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
		return 0
	}
	return pid
}

// TestHostIDFlag: --host-id wins over HOMEWORK_HOST_ID, which wins over
// the hostname; an empty one is refused where command runs are bound to
// hosts, and a multi-line one everywhere.
func TestHostIDFlag(t *testing.T) {
	root := t.TempDir()
	env := map[string]string{"HOMEWORK_HOST_ID": "from-env"}
	getenv := func(k string) string { return env[k] }
	cfg, err := parseServeConfig([]string{"--host-id", "from-flag"}, getenv)
	if err != nil || cfg.HostID != "from-flag" {
		t.Fatalf("flag: %+v %v", cfg, err)
	}
	if cfg, err = parseServeConfig(nil, getenv); err != nil || cfg.HostID != "from-env" {
		t.Fatalf("env: %+v %v", cfg, err)
	}
	hostname, _ := os.Hostname()
	if cfg, err = parseServeConfig(nil, func(string) string { return "" }); err != nil || cfg.HostID != hostname {
		t.Fatalf("default: %+v %v, want the hostname %q", cfg, err, hostname)
	}
	for _, args := range [][]string{
		{"--db", "postgres://u@localhost/h", "--allow-command-runs", root, "--host-id", " "},
		{"--host-id", "a\nb"},
	} {
		if _, err := parseServeConfig(args, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "--host-id") {
			t.Errorf("%q: error %v, want a usage error naming --host-id", args, err)
		}
	}
}
