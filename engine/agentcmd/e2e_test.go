package agentcmd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"homework/engine/agentcmd"
	"homework/engine/spec"
	"homework/engine/waitfor"
)

// countInvocation makes an agent script count its own runs in its state
// directory: $n is 1 on the first run.
const countInvocation = `n=$(( $(cat "$STATE/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$STATE/count"
`

// savePrompt keeps the prompt of run $n in the state directory.
const savePrompt = `cat > "$STATE/prompt-$n.txt"
`

const (
	calcTest3 = `package calc

import "testing"

func TestAdd(t *testing.T) {
	if got := Add(2, 3); got != 5 {
		t.Fatalf("Add(2, 3) = %d, want 5", got)
	}
}

func TestSub(t *testing.T) {
	if got := Sub(5, 3); got != 2 {
		t.Fatalf("Sub(5, 3) = %d, want 2", got)
	}
}

func TestMul(t *testing.T) {
	if got := Mul(2, 3); got != 6 {
		t.Fatalf("Mul(2, 3) = %d, want 6", got)
	}
}
`
	// goFixer fixes one function per run and claims completion every time.
	goFixer = countInvocation + savePrompt + `case $n in
1) printf 'package calc\n\nfunc Add(a, b int) int { return a + b }\n' > add.go; echo "Fixed Add." ;;
2) printf 'package calc\n\nfunc Sub(a, b int) int { return a - b }\n' > sub.go; echo "Fixed Sub." ;;
*) printf 'package calc\n\nfunc Mul(a, b int) int { return a * b }\n' > mul.go; echo "Fixed Mul." ;;
esac
echo "All tests pass now."
echo "<promise>COMPLETE</promise>"
echo "Summary: fixed the calculator."`
)

func TestCommandRunsThroughTheEngine(t *testing.T) {
	// Subtests that neither stop the engine nor need their own executor
	// options share one engine (opening a database is slow under -race).
	shared := newE2E(t, e2eConfig{})

	t.Run("an agent that fixes a failing Go test one bug per iteration completes after exactly three iterations", func(t *testing.T) {
		if _, err := exec.LookPath("go"); err != nil {
			t.Skip("go is not on PATH")
		}
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("calc")
		writeFile(t, wd, "go.mod", "module calc\n\ngo 1.21\n")
		writeFile(t, wd, "add.go", "package calc\n\nfunc Add(a, b int) int { return a - b }\n")
		writeFile(t, wd, "sub.go", "package calc\n\nfunc Sub(a, b int) int { return a + b }\n")
		writeFile(t, wd, "mul.go", "package calc\n\nfunc Mul(a, b int) int { return a + b }\n")
		writeFile(t, wd, "calc_test.go", calcTest3)
		script, state := agent(t, goFixer)
		cfg := commandRun(script, wd, spec.CheckSpec{Type: spec.CheckCommand, Name: "go test", Argv: []string{"go", "test", "./..."}, TimeoutMS: 120_000})
		cfg.Agent.Env = goEnvNames
		run := h.create(cfg)

		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted || run.StopReason == nil || run.StopReason.Type != spec.StopCompleted {
			t.Fatalf("run is %s (%+v), want completed\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		if run.Metrics.Iterations != 3 || run.Metrics.FalseCompletionsBlocked != 2 {
			t.Fatalf("metrics: %d iterations, %d false completions blocked; want 3 and 2", run.Metrics.Iterations, run.Metrics.FalseCompletionsBlocked)
		}
		report := *run.Report
		if report.Metrics.FalseCompletionsBlocked != 2 || report.StoppingReason.Type != spec.StopCompleted {
			t.Errorf("report metrics %+v, stopping reason %+v", report.Metrics, report.StoppingReason)
		}

		its := h.iterations(run.ID)
		if len(its) != 3 {
			t.Fatalf("%d iterations, want 3", len(its))
		}
		stillFailing := [][]string{{"TestSub", "TestMul"}, {"TestMul"}}
		fixed := [][]string{{"TestAdd"}, {"TestAdd", "TestSub"}}
		for i, it := range its[:2] {
			g, cr := gateOf(t, it), checksOf(t, it)
			if it.Status != spec.IterSucceeded || g.Decision.Decision != spec.DecisionContinue || !g.FalseCompletion {
				t.Errorf("iteration %d: status %s, gate %+v; want a blocked false completion", it.Iteration, it.Status, g.Decision)
			}
			if !strings.Contains(strings.Join(g.Reasons, "\n"), `completion claim refused: check "go test" failed`) {
				t.Errorf("iteration %d: the reasons do not name the failing check: %q", it.Iteration, g.Reasons)
			}
			if len(cr) != 1 || cr[0].Passed || cr[0].Name != "go test" {
				t.Fatalf("iteration %d checks: %+v", it.Iteration, cr)
			}
			for _, name := range stillFailing[i] {
				if !strings.Contains(cr[0].OutputTail, "--- FAIL: "+name) {
					t.Errorf("iteration %d: %s does not fail in the check output:\n%s", it.Iteration, name, cr[0].OutputTail)
				}
			}
			for _, name := range fixed[i] {
				if strings.Contains(cr[0].OutputTail, "--- FAIL: "+name) {
					t.Errorf("iteration %d: %s still fails:\n%s", it.Iteration, name, cr[0].OutputTail)
				}
			}
			if it.Metrics.FalseCompletionsBlocked != 1 {
				t.Errorf("iteration %d counts %d false completions", it.Iteration, it.Metrics.FalseCompletionsBlocked)
			}
		}
		if g, cr := gateOf(t, its[2]), checksOf(t, its[2]); g.Decision.Decision != spec.DecisionComplete || g.FalseCompletion ||
			len(cr) != 1 || !cr[0].Passed {
			t.Errorf("iteration 3: gate %+v, checks %+v; want complete with the check passing", g.Decision, cr)
		}

		evs := h.requireBasics(run.ID)
		crs := ofType(evs, "check_result")
		gates := ofType(evs, "gate_decision")
		if len(crs) != 3 || len(gates) != 3 {
			t.Fatalf("%d check_result and %d gate_decision events, want 3 and 3", len(crs), len(gates))
		}
		for i, e := range gates {
			g := decode[gateEvent](t, e.Data)
			if want := i < 2; g.Iteration != i+1 || g.FalseCompletion != want {
				t.Errorf("gate_decision %d: %+v", i+1, g)
			}
			if c := decode[checkResultEvent](t, crs[i].Data); c.Iteration != i+1 || c.Check.Passed != (i == 2) {
				t.Errorf("check_result %d: %+v", i+1, c)
			}
		}
		for i, want := range []string{"Fixed Add.", "Fixed Sub.", "Fixed Mul."} {
			if out := agentOutput(t, evs, i+1); !strings.Contains(out, want) || !strings.Contains(out, "<promise>COMPLETE</promise>") {
				t.Errorf("iteration %d agent_output %q lacks %q", i+1, out, want)
			}
		}
		if n := len(ofType(evs, "run_completed")); n != 1 {
			t.Errorf("%d run_completed events", n)
		}
		if ns := h.notifications(run.ID); len(ns) != 1 || ns[0].Kind != "run_completed" {
			t.Errorf("notifications: %+v", ns)
		}

		// The refusal and the failing test output reached the next prompt.
		p2 := readFile(t, filepath.Join(state, "prompt-2.txt"))
		for _, s := range []string{"completion claim refused", `check "go test" failed`, "--- FAIL: TestSub"} {
			if !strings.Contains(p2, s) {
				t.Errorf("prompt 2 lacks %q:\n%s", s, p2)
			}
		}
		if got := readFile(t, filepath.Join(wd, "mul.go")); !strings.Contains(got, "a * b") {
			t.Errorf("mul.go was not fixed: %s", got)
		}
		h.stop()
		progress := readFile(t, filepath.Join(wd, ".homework", "progress.txt"))
		if n := strings.Count(progress, "\n## Iteration "); n != 3 || !strings.Contains(progress, "Decision: complete") {
			t.Errorf("progress.txt has %d entries:\n%s", n, progress)
		}
	})

	t.Run("an agent that claims completion while its check fails is blocked, told why, and completes once it really fixes it", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("status")
		writeFile(t, wd, "status.txt", "broken\n")
		script, state := agent(t, countInvocation+savePrompt+`if [ "$n" -ge 2 ]; then
	echo fixed > status.txt
	echo "Fixed the status for real."
else
	echo "Everything looks fine to me."
fi
echo "<promise>COMPLETE</promise>"`)
		check := spec.CheckSpec{Type: spec.CheckCommand, Name: "status says fixed", Argv: []string{"grep", "-qx", "fixed", "status.txt"}}
		run := h.create(commandRun(script, wd, check))
		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted || run.Metrics.Iterations != 2 || run.Metrics.FalseCompletionsBlocked != 1 {
			t.Fatalf("run is %s after %d iterations with %d false completions; want completed, 2, 1\n%s",
				run.Status, run.Metrics.Iterations, run.Metrics.FalseCompletionsBlocked, h.eventDump(run.ID))
		}
		its := h.iterations(run.ID)
		g1 := gateOf(t, its[0])
		if g1.Decision.Decision != spec.DecisionContinue || !g1.FalseCompletion || len(g1.Reasons) == 0 ||
			!strings.HasPrefix(g1.Reasons[0], "completion claim refused") ||
			!strings.Contains(g1.Reasons[0], `check "status says fixed" failed: grep -qx fixed status.txt failed: exit status 1`) {
			t.Errorf("iteration 1 gate: %+v", g1.Decision)
		}
		if g1.Signals.Failure == "" || !strings.HasPrefix(g1.Signals.Failure, "status says fixed: ") {
			t.Errorf("iteration 1 signals: %+v", g1.Signals)
		}
		if g2 := gateOf(t, its[1]); g2.Decision.Decision != spec.DecisionComplete || g2.FalseCompletion {
			t.Errorf("iteration 2 gate: %+v", g2.Decision)
		}
		evs := h.requireBasics(run.ID)
		var sawBlocked bool
		for _, e := range ofType(evs, "gate_decision") {
			if g := decode[gateEvent](t, e.Data); g.Iteration == 1 {
				sawBlocked = g.FalseCompletion && g.Decision == spec.DecisionContinue
			}
		}
		if !sawBlocked {
			t.Errorf("no gate_decision event records the blocked claim:\n%s", h.eventDump(run.ID))
		}
		c1 := decode[checkResultEvent](t, ofType(evs, "check_result")[0].Data)
		if c1.Iteration != 1 || c1.Check.Passed || c1.Check.Name != "status says fixed" {
			t.Errorf("first check_result: %+v", c1)
		}
		p2 := readFile(t, filepath.Join(state, "prompt-2.txt"))
		for _, s := range []string{"# Feedback on the previous iteration", "completion claim refused", "## status says fixed (command)"} {
			if !strings.Contains(p2, s) {
				t.Errorf("prompt 2 lacks %q:\n%s", s, p2)
			}
		}
	})

	t.Run("an agent that reports BLOCKED waits for the person and sees the answer in its next prompt", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("blocked")
		const question = "Which database should I use, SQLite or Postgres?"
		script, state := agent(t, countInvocation+savePrompt+`if grep -q "Use SQLite" "$STATE/prompt-$n.txt"; then
	echo sqlite > db-choice.txt
	echo "Chose SQLite as told."
	echo "<promise>COMPLETE</promise>"
else
	echo "I cannot pick a database on my own."
	echo "<promise>BLOCKED</promise>"
	echo "Reason: `+question+`"
fi`)
		check := spec.CheckSpec{Type: spec.CheckContentPattern, Name: "database chosen", Pattern: `(?m)^sqlite$`, Target: "document:db-choice.txt"}
		run := h.create(commandRun(script, wd, check))

		run = h.settled(run.ID)
		if run.Status != spec.StatusWaiting || run.Waiting == nil || run.Waiting.Reason != spec.StopBlocked ||
			!slices.Equal(run.Waiting.Questions, []string{question}) {
			t.Fatalf("run is %s waiting %+v; want waiting_on_user, blocked, with the question\n%s", run.Status, run.Waiting, h.eventDump(run.ID))
		}
		if g := gateOf(t, h.iterations(run.ID)[0]); g.Decision.Decision != spec.DecisionWait || g.WaitReason != spec.StopBlocked || g.FalseCompletion {
			t.Errorf("iteration 1 gate: %+v", g.Decision)
		}
		evs := h.events(run.ID)
		waits := ofType(evs, "run_waiting_on_user")
		if len(waits) != 1 || !strings.Contains(string(waits[0].Data), `"reason":"blocked"`) {
			t.Errorf("run_waiting_on_user events: %d", len(waits))
		}
		if ns := h.notifications(run.ID); len(ns) != 1 || ns[0].Kind != "run_waiting_on_user" || !strings.HasSuffix(ns[0].Message, " — "+question) {
			t.Errorf("notifications: %+v", ns)
		}

		if _, err := h.eng.Respond(h.ctx, h.admin.ID, run.ID, []string{"Use SQLite."}); err != nil {
			t.Fatal(err)
		}
		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted || run.Metrics.Iterations != 2 || run.Metrics.FalseCompletionsBlocked != 0 {
			t.Fatalf("run is %s after %d iterations; want completed after 2\n%s", run.Status, run.Metrics.Iterations, h.eventDump(run.ID))
		}
		p2 := readFile(t, filepath.Join(state, "prompt-2.txt"))
		for _, s := range []string{"# Messages from the person", "Use SQLite.", "Questions you asked before:", question} {
			if !strings.Contains(p2, s) {
				t.Errorf("prompt 2 lacks %q:\n%s", s, p2)
			}
		}
		evs = h.requireBasics(run.ID)
		if len(ofType(evs, "user_response")) != 1 || len(ofType(evs, "run_completed")) != 1 {
			t.Errorf("events:\n%s", h.eventDump(run.ID))
		}
	})

	t.Run("an agent that only echoes its prompt is never completed and no false completion is counted", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("echo")
		cfg := commandRun("", wd, spec.CheckSpec{Type: spec.CheckDocumentExists, Name: "done file", Path: "DONE.md"})
		cfg.Agent.Argv = []string{"cat"}
		cfg.Budgets.MaxIterations = 6
		run := h.create(cfg)
		run = h.settled(run.ID)
		if run.Status != spec.StatusStopped || run.StopReason == nil ||
			(run.StopReason.Type != spec.StopNoProgress && run.StopReason.Type != spec.StopMaxIterations) {
			t.Fatalf("run is %s (%+v); want stopped by the stall breaker or the budget\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		if run.Metrics.FalseCompletionsBlocked != 0 {
			t.Errorf("%d false completions counted for an echo", run.Metrics.FalseCompletionsBlocked)
		}
		evs := h.requireBasics(run.ID)
		for _, e := range ofType(evs, "gate_decision") {
			g := decode[gateEvent](t, e.Data)
			if g.FalseCompletion || g.Decision == spec.DecisionComplete || strings.Contains(strings.Join(g.Reasons, "\n"), "completion claim") {
				t.Errorf("iteration %d: the echo was taken for a claim: %+v", g.Iteration, g)
			}
		}
		// The echo did carry the promise tag: the gate saw it and ignored it.
		if out := agentOutput(t, evs, 1); !strings.Contains(out, "<promise>COMPLETE</promise>") {
			t.Errorf("the echoed prompt has no promise tag:\n%s", out)
		}
		if len(ofType(evs, "run_completed")) != 0 {
			t.Error("a run_completed event was emitted")
		}
	})

	t.Run("a stalling agent is stopped for no progress after three iterations with the evidence", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("stall")
		script, _ := agent(t, `cat >/dev/null
echo "Still thinking about the problem."`)
		check := spec.CheckSpec{Type: spec.CheckCommand, Name: "tests", Argv: []string{"sh", "-c", "echo 'FAIL: TestThing'; exit 1"}}
		run := h.create(commandRun(script, wd, check))
		run = h.settled(run.ID)
		if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopNoProgress {
			t.Fatalf("run is %s (%+v); want stopped for no_progress\n%s", run.Status, run.StopReason, h.eventDump(run.ID))
		}
		if run.Metrics.Iterations != 3 {
			t.Errorf("stopped after %d iterations, want 3", run.Metrics.Iterations)
		}
		if !strings.Contains(run.StopReason.Detail, "stalled: the same output hash 3 times in a row") {
			t.Errorf("stop detail %q", run.StopReason.Detail)
		}
		ev := decode[spec.Evidence](t, run.StopReason.Evidence)
		its := h.iterations(run.ID)
		last := gateOf(t, its[len(its)-1])
		if ev.Breaker != "stall_output_hash" || ev.Threshold != 3 || len(ev.Fingerprints) != 3 ||
			ev.Fingerprints[0] != last.Signals.OutputHash || ev.Fingerprints[1] != ev.Fingerprints[0] || ev.Fingerprints[2] != ev.Fingerprints[0] {
			t.Errorf("evidence %+v (last output hash %s)", ev, last.Signals.OutputHash)
		}
		if len(ev.LastSummaries) != 3 || !strings.Contains(ev.LastSummaries[0], "Still thinking about the problem.") {
			t.Errorf("evidence summaries %q", ev.LastSummaries)
		}
		if len(ev.LastFailures) == 0 || !strings.HasPrefix(ev.LastFailures[0], "tests: sh -c") {
			t.Errorf("evidence failures %q", ev.LastFailures)
		}
		if ev.LastDiffHash == "" || ev.LastOutputHash != last.Signals.OutputHash {
			t.Errorf("evidence hashes %q %q", ev.LastOutputHash, ev.LastDiffHash)
		}
		evs := h.requireBasics(run.ID)
		if len(ofType(evs, "run_stalled")) != 1 || len(ofType(evs, "run_stopped")) != 0 {
			t.Errorf("want one run_stalled and no run_stopped:\n%s", h.eventDump(run.ID))
		}
		gates := ofType(evs, "gate_decision")
		if g := decode[gateEvent](t, gates[len(gates)-1].Data); g.Decision != spec.DecisionStop || g.StopReason != spec.StopNoProgress {
			t.Errorf("last gate_decision %+v", g)
		}
		if ns := h.notifications(run.ID); len(ns) != 1 || ns[0].Kind != "run_stopped" || !strings.Contains(ns[0].Message, "stalled") {
			t.Errorf("notifications: %+v", ns)
		}
		h.stop()
		if p := readFile(t, filepath.Join(wd, ".homework", "progress.txt")); !strings.Contains(p, "Decision: stop (no_progress)") {
			t.Errorf("progress.txt does not record the stop:\n%s", p)
		}
	})

	t.Run("a hung agent is killed with its children at its timeout and the run stops on the repeated timeout", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("hung")
		script, state := agent(t, countInvocation+`cat >/dev/null
sleep 300 &
echo $! > "$STATE/child-$n.pid"
echo $$ > "$STATE/agent-$n.pid"
echo "Waiting for something that never comes."
wait`)
		cfg := commandRun(script, wd)
		cfg.Agent.TimeoutMS = 1000
		cfg.Breakers.RepeatedError = 2
		run := h.create(cfg)
		run = h.settled(run.ID)
		var pids []int
		for n := 1; n <= run.Metrics.Iterations; n++ {
			for _, f := range []string{"child", "agent"} {
				pid := readPid(t, filepath.Join(state, f+"-"+strconv.Itoa(n)+".pid"))
				t.Cleanup(func() { killIfAlive(pid) })
				pids = append(pids, pid)
			}
		}
		if run.Status != spec.StatusStopped || run.StopReason == nil || run.StopReason.Type != spec.StopRepeatedError || run.Metrics.Iterations != 2 {
			t.Fatalf("run is %s (%+v) after %d iterations; want stopped for repeated_error after 2\n%s",
				run.Status, run.StopReason, run.Metrics.Iterations, h.eventDump(run.ID))
		}
		for _, pid := range pids {
			if !waitfor.Gone(pid, 2*time.Second) {
				t.Errorf("process %d outlived the timed-out agent", pid)
			}
		}
		for _, it := range h.iterations(run.ID) {
			if it.Status != spec.IterFailed || it.ErrorFingerprint != "timeout" || !strings.Contains(it.Error, "timed out") {
				t.Errorf("iteration %d: status %s, fingerprint %q, error %q", it.Iteration, it.Status, it.ErrorFingerprint, it.Error)
			}
			if g := gateOf(t, it); g.Signals.ErrorFP != "timeout" {
				t.Errorf("iteration %d signals %+v", it.Iteration, g.Signals)
			}
		}
		ev := decode[spec.Evidence](t, run.StopReason.Evidence)
		if ev.Breaker != "repeated_error" || !slices.Equal(ev.Fingerprints, []string{"timeout", "timeout"}) {
			t.Errorf("evidence %+v", ev)
		}
		evs := h.requireBasics(run.ID)
		exits := ofType(evs, spec.EventAgentExit)
		if len(exits) != 2 {
			t.Fatalf("%d agent_exit events", len(exits))
		}
		for _, e := range exits {
			if x := decode[exitEvent](t, e.Data); !x.TimedOut || !strings.Contains(x.Status, "killed by signal") {
				t.Errorf("agent_exit %+v", x)
			}
		}
		if out := agentOutput(t, evs, 1); !strings.Contains(out, "Waiting for something that never comes.") {
			t.Errorf("the hung agent's output was lost: %q", out)
		}
	})

	t.Run("canceling a run mid-iteration kills the agent's process group at once and runs no further iteration", func(t *testing.T) {
		h := newE2E(t, e2eConfig{})
		wd := h.workdir("cancel")
		script, state := agent(t, countInvocation+`cat >/dev/null
sleep 300 &
echo $! > "$STATE/child.pid"
echo $$ > "$STATE/agent.pid"
echo "Started the long job."
wait`)
		cfg := commandRun(script, wd)
		cfg.Agent.TimeoutMS = 60_000
		run := h.create(cfg)
		h.waitEvent(run.ID, "the agent's output", func(e *spec.Event) bool {
			return e.Type == spec.EventAgentOutput && strings.Contains(string(e.Data), "Started the long job.")
		})
		child := readPid(t, filepath.Join(state, "child.pid"))
		leader := readPid(t, filepath.Join(state, "agent.pid"))
		t.Cleanup(func() { killIfAlive(child); killIfAlive(leader) })
		if waitfor.ProcessGone(child) || waitfor.ProcessGone(leader) {
			t.Fatal("the agent is not running before the cancel")
		}

		canceled, err := h.eng.Cancel(h.ctx, h.admin.ID, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if canceled.Status != spec.StatusCanceled || canceled.StopReason == nil || canceled.StopReason.Type != spec.StopCanceled {
			t.Fatalf("Cancel returned a run %s (%+v)", canceled.Status, canceled.StopReason)
		}
		// The agent and its child sleep far longer than this guard; they are
		// gone within it only because the cancel killed the process group.
		if !waitfor.Gone(child, 30*time.Second) || !waitfor.Gone(leader, 30*time.Second) {
			t.Fatalf("the agent's process group outlived the cancel (child gone: %t, agent gone: %t)", waitfor.ProcessGone(child), waitfor.ProcessGone(leader))
		}

		h.waitEvent(run.ID, "the canceled iteration to be recorded", func(e *spec.Event) bool { return e.Type == "iteration_completed" })
		h.stop() // nothing may run after this: any stray job would have run by now or never
		run = h.run(run.ID)
		its := h.iterations(run.ID)
		if run.Status != spec.StatusCanceled || run.Iteration != 1 || len(its) != 1 || its[0].Status != spec.IterCanceled {
			t.Fatalf("run %s at iteration %d with %d iterations (first %s)", run.Status, run.Iteration, len(its), its[0].Status)
		}
		if n := readFile(t, filepath.Join(state, "count")); strings.TrimSpace(n) != "1" {
			t.Errorf("the agent ran %s times", n)
		}
		evs := h.requireBasics(run.ID)
		if len(ofType(evs, "run_canceled")) != 1 || len(ofType(evs, "iteration_started")) != 1 || len(ofType(evs, "gate_decision")) != 0 {
			t.Errorf("events:\n%s", h.eventDump(run.ID))
		}
		if ns := h.notifications(run.ID); len(ns) != 1 || ns[0].Kind != "run_canceled" {
			t.Errorf("notifications: %+v", ns)
		}
	})

	t.Run("output over the cap is bounded in the events and the run carries on", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("loud")
		const total = 300_000
		script, _ := agent(t, `cat >/dev/null
echo "Start of the output."
head -c `+strconv.Itoa(total)+` /dev/zero | tr '\0' 'x'
echo
echo "End of the output."
echo "<promise>COMPLETE</promise>"`)
		cfg := commandRun(script, wd, spec.CheckSpec{Type: spec.CheckContentPattern, Name: "says the end", Pattern: "End of the output"})
		cfg.Agent.OutputCapBytes = agentcmd.MinOutputCap
		run := h.create(cfg)
		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted || run.Metrics.Iterations != 1 {
			t.Fatalf("run is %s after %d iterations; want completed after 1 (the tail with the promise is kept)\n%s",
				run.Status, run.Metrics.Iterations, h.eventDump(run.ID))
		}
		evs := h.requireBasics(run.ID)
		outs := ofType(evs, spec.EventAgentOutput)
		streamed := 0
		for _, e := range outs {
			streamed += len(decode[outputEvent](t, e.Data).Text)
		}
		if streamed > agentcmd.MinOutputCap || streamed == 0 {
			t.Errorf("%d bytes of output streamed with a cap of %d", streamed, agentcmd.MinOutputCap)
		}
		if len(outs) == 0 || !decode[outputEvent](t, outs[len(outs)-1].Data).Truncated {
			t.Error("the last agent_output event is not marked truncated")
		}
		exits := ofType(evs, spec.EventAgentExit)
		if len(exits) != 1 {
			t.Fatalf("%d agent_exit events", len(exits))
		}
		if x := decode[exitEvent](t, exits[0].Data); x.OutputBytes < total || x.DroppedBytes < total-agentcmd.MinOutputCap || x.ExitCode != 0 {
			t.Errorf("agent_exit %+v", x)
		}
		var size int
		for _, e := range evs {
			size += len(e.Data)
		}
		if size > 32<<10 {
			t.Errorf("the run's events hold %d bytes for an agent capped at %d", size, agentcmd.MinOutputCap)
		}
		it := h.iterations(run.ID)[0]
		if it.Status != spec.IterSucceeded || !strings.Contains(it.Summary, "bytes of output over the cap were dropped") {
			t.Errorf("iteration %s, summary %q", it.Status, it.Summary)
		}
	})

	t.Run("a malformed prd.json fails its check with the parse error and the run completes once it is fixed", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("prd")
		script, _ := agent(t, countInvocation+`cat >/dev/null
if [ "$n" -eq 1 ]; then
	printf '{"userStories": [{"id": "US-1", "title": "Log in", "passes": true},' > prd.json
	echo "Marked US-1 as passing."
else
	printf '{"userStories": [{"id": "US-1", "title": "Log in", "passes": true}]}\n' > prd.json
	echo "Repaired prd.json."
fi
echo "<promise>COMPLETE</promise>"`)
		run := h.create(commandRun(script, wd, spec.CheckSpec{Type: spec.CheckPRDAllPass, Name: "prd"}))
		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted || run.Metrics.Iterations != 2 || run.Metrics.FalseCompletionsBlocked != 1 {
			t.Fatalf("run is %s after %d iterations; want completed after 2\n%s", run.Status, run.Metrics.Iterations, h.eventDump(run.ID))
		}
		evs := h.requireBasics(run.ID)
		crs := ofType(evs, "check_result")
		if len(crs) != 2 {
			t.Fatalf("%d check_result events", len(crs))
		}
		c1, c2 := decode[checkResultEvent](t, crs[0].Data), decode[checkResultEvent](t, crs[1].Data)
		if c1.Iteration != 1 || c1.Check.Passed || !strings.Contains(c1.Check.Message, "prd.json cannot be read: invalid JSON") ||
			!strings.Contains(c1.Check.Message, "unexpected end of JSON input") {
			t.Errorf("check_result of the malformed prd.json: %+v", c1)
		}
		if c2.Iteration != 2 || !c2.Check.Passed {
			t.Errorf("check_result of the fixed prd.json: %+v", c2)
		}
		it1 := h.iterations(run.ID)[0]
		if it1.Status != spec.IterSucceeded || it1.Error != "" {
			t.Errorf("iteration 1 is %s with error %q; a bad prd.json is a failed check, not a failed iteration", it1.Status, it1.Error)
		}
		if g := gateOf(t, it1); !strings.Contains(strings.Join(g.Reasons, "\n"), "invalid JSON") {
			t.Errorf("iteration 1 gate reasons %q", g.Reasons)
		}
	})

	t.Run("progress.txt gets one entry per iteration, stays bounded and leaves no temporary files", func(t *testing.T) {
		const maxBytes, steps = 1500, 12
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{ProgressMaxBytes: maxBytes, ProgressMaxEntries: 1000}})
		wd := h.workdir("progress")
		script, state := agent(t, countInvocation+`cat >/dev/null
cp .homework/progress.txt "$STATE/progress-before-$n.txt" 2>/dev/null || : > "$STATE/progress-before-$n.txt"
echo "step $n" > step.txt
echo "Did step $n of `+strconv.Itoa(steps)+`."
if [ "$n" -ge `+strconv.Itoa(steps)+` ]; then echo "<promise>COMPLETE</promise>"; fi`)
		cfg := commandRun(script, wd)
		cfg.Budgets.MaxIterations = steps + 5
		run := h.create(cfg)
		run = h.settled(run.ID)
		if run.Status != spec.StatusCompleted || run.Metrics.Iterations != steps {
			t.Fatalf("run is %s after %d iterations; want completed after %d\n%s", run.Status, run.Metrics.Iterations, steps, h.eventDump(run.ID))
		}
		h.stop() // the last entry is written after the run completes
		h.requireBasics(run.ID)

		progress := readFile(t, filepath.Join(wd, ".homework", "progress.txt"))
		if len(progress) > maxBytes {
			t.Errorf("progress.txt is %d bytes, over its bound of %d", len(progress), maxBytes)
		}
		entries := regexp.MustCompile(`(?m)^## Iteration (\d+) `).FindAllStringSubmatch(progress, -1)
		tally := regexp.MustCompile(`(?m)^Tally: entries=(\d+) first=(\d+) last=(\d+)`).FindStringSubmatch(progress)
		if tally == nil || len(entries) == 0 {
			t.Fatalf("progress.txt was not folded (no tally or no entries):\n%s", progress)
		}
		folded, _ := strconv.Atoi(tally[1])
		if folded+len(entries) != steps || tally[2] != "1" || tally[3] != strconv.Itoa(folded) {
			t.Errorf("tally %v and %d entries do not make one entry per iteration:\n%s", tally, len(entries), progress)
		}
		for i, m := range entries {
			if m[1] != strconv.Itoa(folded+i+1) {
				t.Errorf("entry %d is for iteration %s, want %d", i, m[1], folded+i+1)
			}
		}
		if !strings.Contains(progress, "d.continue="+strconv.Itoa(folded)) {
			t.Errorf("the tally does not count %d continue decisions:\n%s", folded, progress)
		}
		blocks := strings.Split(progress, "\n## Iteration ")
		for _, b := range blocks[1 : len(blocks)-1] {
			if !strings.Contains(b, "\nDecision: continue") {
				t.Errorf("entry lacks its decision:\n%s", b)
			}
		}
		if last := blocks[len(blocks)-1]; !strings.HasPrefix(last, strconv.Itoa(steps)+" ") || !strings.Contains(last, "\nDecision: complete (completed)") {
			t.Errorf("the last entry is not the completing one:\n%s", last)
		}

		// Every version the agent saw was bounded too. (Whether it already
		// held the previous entry is a race: see the next subtest.)
		for n := 1; n <= steps; n++ {
			snap := readFile(t, filepath.Join(state, "progress-before-"+strconv.Itoa(n)+".txt"))
			if len(snap) > maxBytes {
				t.Errorf("progress.txt before iteration %d is %d bytes:\n%s", n, len(snap), snap)
			}
		}
		des, err := os.ReadDir(filepath.Join(wd, ".homework"))
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range des {
			// The work directory's lock file stays (empty); it is never renamed or removed
			// so that every attempt locks the same inode. runs/ holds the change snapshots.
			if de.Name() != "progress.txt" && de.Name() != "lock" && de.Name() != "runs" {
				t.Errorf("left behind in .homework: %s", de.Name())
			}
		}
	})

	t.Run("canceling a run while its command check runs kills the check at once", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("cancel-check")
		script, state := agent(t, `cat >/dev/null
echo "Done, over to the checks."`)
		pidFile := filepath.Join(state, "check.pid")
		check := spec.CheckSpec{Type: spec.CheckCommand, Name: "slow check", TimeoutMS: 60_000,
			Argv: []string{"bash", "-c", "sleep 300 & echo $! > " + shellQuote(pidFile) + "; wait"}}
		run := h.create(commandRun(script, wd, check))
		h.waitEvent(run.ID, "the agent's exit", func(e *spec.Event) bool { return e.Type == spec.EventAgentExit })
		if !fileWithin(pidFile, 20*time.Second) {
			t.Fatal("the check did not start")
		}
		pid := readPid(t, pidFile)
		t.Cleanup(func() { killIfAlive(pid) })
		if _, err := h.eng.Cancel(h.ctx, h.admin.ID, run.ID); err != nil {
			t.Fatal(err)
		}
		if !waitfor.Gone(pid, 3*time.Second) {
			t.Fatal("the check's process outlived the cancel of its run")
		}
		h.waitEvent(run.ID, "the canceled iteration to be recorded", func(e *spec.Event) bool { return e.Type == "iteration_completed" })
		if its := h.iterations(run.ID); len(its) != 1 || its[0].Status != spec.IterCanceled {
			t.Errorf("iterations: %d, first %s", len(its), its[0].Status)
		}
	})

	t.Run("the next iteration starts only after the previous progress entry is written", func(t *testing.T) {
		// A slow progress write (slow disk, or a commit_each_iteration git
		// commit) must still land before the next iteration starts. A slow
		// clock makes it slow here.
		slow := func() time.Time { time.Sleep(300 * time.Millisecond); return time.Now() }
		h := newE2E(t, e2eConfig{exec: agentcmd.Options{Now: slow}})
		wd := h.workdir("order")
		script, state := agent(t, countInvocation+savePrompt+`echo "step $n" > step.txt
echo "Did step $n."
if [ "$n" -ge 3 ]; then echo "<promise>COMPLETE</promise>"; fi`)
		run := h.create(commandRun(script, wd))
		if run = h.settled(run.ID); run.Status != spec.StatusCompleted {
			t.Fatalf("run is %s", run.Status)
		}
		for n := 2; n <= 3; n++ {
			p := readFile(t, filepath.Join(state, "prompt-"+strconv.Itoa(n)+".txt"))
			if !strings.Contains(p, "## Iteration "+strconv.Itoa(n-1)+" ") {
				t.Errorf("prompt %d lacks the progress entry of iteration %d:\n%s", n, n-1, p)
			}
		}
	})
}

func TestCommandRunRefusals(t *testing.T) {
	check := spec.CheckSpec{Type: spec.CheckCommand, Name: "tests", Argv: []string{"true"}}
	refused := func(t *testing.T, h *e2e, user *spec.User, cfg spec.Config, code, field, message string) {
		t.Helper()
		run, err := h.eng.CreateRun(h.ctx, user, cfg)
		if err == nil {
			t.Fatalf("run %s was created", run.ID)
		}
		if spec.ErrorCode(err) != code || spec.ErrorField(err) != field || !strings.Contains(spec.ErrorMessage(err), message) {
			t.Fatalf("got code %q field %q message %q; want %q %q containing %q", spec.ErrorCode(err), spec.ErrorField(err), spec.ErrorMessage(err), code, field, message)
		}
		page, err := h.db.ListRuns(h.ctx, user.ID, spec.RunFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Runs) != 0 {
			t.Fatalf("%d runs were stored", len(page.Runs))
		}
	}
	script, _ := agent(t, `echo hi`)
	shared := newE2E(t, e2eConfig{})

	t.Run("a server without the command executor refuses command runs", func(t *testing.T) {
		h := newE2E(t, e2eConfig{noCommandExecutor: true})
		refused(t, h, h.admin, commandRun(script, h.workdir("w")), spec.EUNAVAILABLE, "executor", "The command executor is not available on this server.")
	})
	t.Run("a command executor without a root refuses command runs", func(t *testing.T) {
		h := newE2E(t, e2eConfig{noRoot: true})
		refused(t, h, h.admin, commandRun(script, h.workdir("w")), spec.EFORBIDDEN, "", "Command runs are not enabled on this server")
	})
	t.Run("a server that does not allow command runs refuses command checks", func(t *testing.T) {
		h := newE2E(t, e2eConfig{commandRunsForbidden: true})
		refused(t, h, h.admin, commandRun(script, h.workdir("w"), check), spec.EINVALID, "completion.checks[0].type", "--allow-command-runs")
	})
	t.Run("a user who is not an admin is refused", func(t *testing.T) {
		h := shared.in(t)
		u, err := h.db.CreateUser(h.ctx, "user@example.com", "x", false)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, h, u, commandRun(script, h.workdir("w")), spec.EFORBIDDEN, "", "Only admins may create command runs.")
	})
	t.Run("a work directory that climbs out of the root through .. is refused", func(t *testing.T) {
		h := shared.in(t)
		wd := h.workdir("w")
		refused(t, h, h.admin, commandRun(script, filepath.Join(wd, "..", "..")), spec.EFORBIDDEN, "agent.workdir", "The work directory must be under "+h.root)
		refused(t, h, h.admin, commandRun(script, "../"+filepath.Base(t.TempDir())), spec.EFORBIDDEN, "agent.workdir", "The work directory must be under "+h.root)
	})
	t.Run("a work directory that leaves the root through a symlink is refused", func(t *testing.T) {
		h := shared.in(t)
		link := filepath.Join(h.root, "escape")
		if err := os.Symlink(t.TempDir(), link); err != nil {
			t.Fatal(err)
		}
		refused(t, h, h.admin, commandRun(script, link), spec.EFORBIDDEN, "agent.workdir", "The work directory must be under "+h.root)
		refused(t, h, h.admin, commandRun(script, "escape"), spec.EFORBIDDEN, "agent.workdir", "The work directory must be under "+h.root)
	})
}
