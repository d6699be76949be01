package main

import (
	"encoding/json"
	"homework/engine/spec"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// adminToken adds an admin and returns a token for it.
func adminToken(t testing.TB, bin, dbPath string) string {
	t.Helper()
	add := exec.Command(bin, "user", "add", "--email", "admin@example.com", "--admin", "--db", dbPath)
	add.Stdin = strings.NewReader("admin-test-password\n")
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("user add: %v %s", err, out)
	}
	out, err := exec.Command(bin, "token", "create", "--email", "admin@example.com", "--db", dbPath).Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	return strings.TrimSpace(string(out))
}

type apiEvent struct {
	Seq  int64           `json:"seq"`
	Type spec.EventType  `json:"type"`
	Data json.RawMessage `json:"data"`
}

// runEvents returns the run's events, checking seq is gap-free.
func runEvents(t testing.TB, s *server, token, id string) []apiEvent {
	t.Helper()
	var page struct {
		Events []apiEvent `json:"events"`
	}
	if code := s.api(t, token, "GET", "/api/runs/"+id+"/events?limit=1000", nil, &page); code != 200 {
		t.Fatalf("events: %d", code)
	}
	for i, e := range page.Events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d (not gap-free)", i+1, e.Seq)
		}
	}
	return page.Events
}

func eventTypes(evs []apiEvent) string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Type))
	}
	return strings.Join(out, " ")
}

// TestSlowCheckUnderAShortLeaseRunsTheAgentOnce: the lease covers the whole
// iteration, checks included, so a check that outlasts the lease several
// times over does not get the iteration recovered and its agent run again.
func TestSlowCheckUnderAShortLeaseRunsTheAgentOnce(t *testing.T) {
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
	agentLog := filepath.Join(root, "agent.log")
	dbPath := filepath.Join(t.TempDir(), "lease.db")
	s := startServer(t, bin, dbPath, "--lease-ttl", "1s", "--allow-command-runs", root)
	token := adminToken(t, bin, dbPath)

	var created struct {
		RunID string `json:"run_id"`
	}
	code := s.api(t, token, "POST", "/api/runs", map[string]any{
		"objective": "run once under a short lease", "executor": "command",
		"agent": map[string]any{"workdir": wd, "argv": []string{"sh", "-c",
			`echo "agent iteration $HOMEWORK_ITERATION" >> ` + agentLog + `; echo 'done <promise>COMPLETE</promise>'`}},
		"completion": map[string]any{"checks": []map[string]any{{"type": "command", "name": "slow check",
			"argv": []string{"sh", "-c", "sleep 4"}, "timeout_ms": 30000}}},
	}, &created)
	if code != 201 || created.RunID == "" {
		t.Fatalf("create run: %d", code)
	}
	waitRunStatus(t, s, token, created.RunID, "completed")

	b, err := os.ReadFile(agentLog)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines != 1 {
		t.Fatalf("the agent ran %d times for one iteration:\n%s\nserver log:\n%s", lines, b, s.log())
	}
	evs := runEvents(t, s, token, created.RunID)
	if strings.Contains(eventTypes(evs), "run_recovered") || strings.Count(eventTypes(evs), "iteration_started") != 1 {
		t.Fatalf("the iteration was recovered while its check ran: %s", eventTypes(evs))
	}
	if last := evs[len(evs)-1].Type; last != "run_completed" {
		t.Fatalf("last event %s: %s", last, eventTypes(evs))
	}
}
