package agentcmd_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
	"homework/engine/waitfor"
)

// TestAHungAgentIsKilledAtTheRunsRunningTimeBudget: an agent that never
// ends, with a timeout of its own far past the run's running-time budget,
// is killed with its children when the budget runs out, mid-iteration: the
// run stops as budget_time, having recorded the budget's running time, not
// the agent's timeout.
func TestAHungAgentIsKilledAtTheRunsRunningTimeBudget(t *testing.T) {
	const budget = 2 * time.Second
	h := newE2E(t, e2eConfig{})
	wd := h.workdir("hung-past-budget")
	script, state := agent(t, countInvocation+`cat >/dev/null
sleep 300 &
echo $! > "$STATE/child.pid"
echo $$ > "$STATE/agent.pid"
echo "Working on something that never ends."
wait
touch "$STATE/finished"`)
	cfg := commandRun(script, wd)
	cfg.Agent.TimeoutMS = time.Hour.Milliseconds()
	cfg.Budgets.IterationTimeoutMS = time.Hour.Milliseconds()
	cfg.Budgets.MaxRunningMS = budget.Milliseconds()
	run := h.create(cfg)
	h.waitEvent(run.ID, "the agent's output", func(e *spec.Event) bool {
		return e.Type == spec.EventAgentOutput && strings.Contains(string(e.Data), "never ends")
	})
	child := readPid(t, filepath.Join(state, "child.pid"))
	leader := readPid(t, filepath.Join(state, "agent.pid"))
	t.Cleanup(func() { killIfAlive(child); killIfAlive(leader) })

	run = h.settled(run.ID)
	if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopBudgetTime {
		t.Fatalf("run is %s (%+v); want stopped for budget_time\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
	}
	for _, pid := range []int{leader, child} {
		if !waitfor.Gone(pid, 5*time.Second) {
			t.Errorf("process %d outlived the running-time budget", pid)
		}
	}
	if m := run.Metrics; m.Iterations != 1 || m.RunningMS < budget.Milliseconds() || m.RunningMS > (budget+10*time.Second).Milliseconds() {
		t.Fatalf("%d iterations, %d ms running; want 1, cut at the %s budget", m.Iterations, m.RunningMS, budget)
	}
	its := h.iterations(run.ID)
	if len(its) != 1 || its[0].Status != spec.IterFailed || its[0].ErrorFingerprint != "budget:"+spec.StopBudgetTime {
		t.Fatalf("iterations: %+v", its)
	}
	exits := ofType(h.requireBasics(run.ID), spec.EventAgentExit)
	if len(exits) != 1 || !strings.Contains(decode[exitEvent](t, exits[0].Data).Status, "killed by signal") {
		t.Fatalf("agent_exit events: %d", len(exits))
	}
	if readFile(t, filepath.Join(state, "count")) != "1\n" {
		t.Errorf("the agent ran more than once")
	}
}
