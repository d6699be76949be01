package agentcmd_test

import (
	"strings"
	"testing"

	"homework/engine/agentcmd"
	"homework/engine/spec"
)

func TestPingPongAgentIsStopped(t *testing.T) {
	h := newE2E(t, e2eConfig{})
	wd := h.workdir("pingpong")
	// Each iteration "fixes" the failing check by breaking the other one.
	script, _ := agent(t, `cat >/dev/null
if [ "$(cat state.txt 2>/dev/null)" = a ]; then
  echo b >state.txt; echo "Fixed check b (iteration $HOMEWORK_ITERATION)."
else
  echo a >state.txt; echo "Fixed check a (iteration $HOMEWORK_ITERATION)."
fi`)
	cfg := commandRun(script, wd,
		spec.CheckSpec{Type: spec.CheckCommand, Name: "a", Argv: []string{"sh", "-c", "grep -qx a state.txt || { echo 'check a fails'; exit 1; }"}},
		spec.CheckSpec{Type: spec.CheckCommand, Name: "b", Argv: []string{"sh", "-c", "grep -qx b state.txt || { echo 'check b fails'; exit 1; }"}})
	cfg.Budgets.MaxIterations = 20
	run := h.settled(h.create(cfg).ID)
	if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopNoProgress {
		t.Fatalf("run is %s (%+v); want stopped for no_progress\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
	}
	if run.Metrics.Iterations > 8 {
		t.Errorf("stopped after %d iterations, want at most 8", run.Metrics.Iterations)
	}
	if !strings.Contains(run.StopReason.Detail, "going in circles") {
		t.Errorf("stop detail %q", run.StopReason.Detail)
	}
	ev := decode[spec.Evidence](t, run.StopReason.Evidence)
	if ev.Breaker != "cycle" || ev.Pattern != "period 2 repeated 3 times" || len(ev.Fingerprints) != 6 ||
		ev.Fingerprints[0] == ev.Fingerprints[1] || ev.Fingerprints[0] != ev.Fingerprints[2] {
		t.Errorf("evidence %+v", ev)
	}
	if len(ev.LastFailures) != 2 || !strings.Contains(strings.Join(ev.LastFailures, "\n"), "check a fails") ||
		!strings.Contains(strings.Join(ev.LastFailures, "\n"), "check b fails") {
		t.Errorf("evidence failures %q", ev.LastFailures)
	}
	h.requireBasics(run.ID)
}

func TestRepeatedErrorQuotesTheError(t *testing.T) {
	h := newE2E(t, e2eConfig{})
	wd := h.workdir("failing")
	script, _ := agent(t, `cat >/dev/null
echo "Starting attempt $HOMEWORK_ITERATION"
echo "fatal: could not reach the model API (attempt $HOMEWORK_ITERATION)" >&2
echo "cleaning up"
exit 1`)
	cfg := commandRun(script, wd)
	cfg.Breakers.RepeatedError = 2
	run := h.settled(h.create(cfg).ID)
	if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopRepeatedError {
		t.Fatalf("run is %s (%+v), want stopped for repeated_error\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
	}
	if d := run.StopReason.Detail; !strings.Contains(d, "the same error repeated 2 times in a row: The agent failed (exit status 1): fatal: could not reach the model API (attempt 2)") {
		t.Errorf("stop detail %q does not quote the error line", d)
	}
}

func TestLastErrorLine(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"building\nerror: x.go:3: undefined: y\nexiting\n", "error: x.go:3: undefined: y"},
		{"just some output\nlast words\n\n", "last words"},
		{"\x1b[31mFAIL\x1b[0m TestAdd\n", "FAIL TestAdd"},
		{"", ""},
	} {
		if got := agentcmd.LastErrorLine(tc.out); got != tc.want {
			t.Errorf("LastErrorLine(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
