package agentcmd_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"homework/engine/checks"
	"homework/engine/spec"
)

const calcBroken = `package calc

func Add(a, b int) int { return a - b }

func Mul(a, b int) int { return a + b }
`

const calcTest = `package calc

import "testing"

func TestAdd(t *testing.T) {
	if got := Add(2, 3); got != 5 {
		t.Fatalf("Add(2, 3) = %d, want 5", got)
	}
}

func TestMul(t *testing.T) {
	if got := Mul(2, 3); got != 6 {
		t.Fatalf("Mul(2, 3) = %d, want 6", got)
	}
}
`

// The agent falsely claims completion first, then fixes Add, then Mul.
const fixerAgent = `cat > .homework/prompt-$HOMEWORK_ITERATION.txt
case $HOMEWORK_ITERATION in
1)
	echo "I looked at calc.go; everything seems fine."
	echo "<promise>COMPLETE</promise>"
	;;
2)
	sed 's/return a - b/return a + b/' calc.go > calc.go.new && mv calc.go.new calc.go
	echo "Fixed Add."
	;;
*)
	cat > calc.go <<'EOF'
package calc

func Add(a, b int) int { return a + b }

func Mul(a, b int) int { return a * b }
EOF
	echo "Fixed Mul; all tests pass now."
	echo "<promise>COMPLETE</promise>"
	echo "Summary: Add and Mul fixed."
	;;
esac`

// TestLoopFixesFailingGoTest drives Iterate, checks.Run and AfterGate the way
// the engine does, until the agent's completion claim passes the checks.
func TestLoopFixesFailingGoTest(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	e, wd := setup(t, agentcmdOptions())
	writeFile(t, wd, "go.mod", "module calc\n\ngo 1.21\n")
	writeFile(t, wd, "calc.go", calcBroken)
	writeFile(t, wd, "calc_test.go", calcTest)
	agent := writeScript(t, wd, "agent.sh", fixerAgent)
	cfg := commandConfig([]string{"sh", agent}, wd)
	cfg.Agent.Env = []string{"GOCACHE", "GOPATH", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN", "GOROOT"}
	cfg.Completion.Checks = []spec.CheckSpec{{Type: spec.CheckCommand, Name: "tests", Argv: []string{"go", "test", "./..."}}}
	if err := checks.Validate(cfg.Completion.Checks, true); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	host := newHost()

	var feedback *spec.Feedback
	var diffs []string
	completedAt := 0
	for i := 1; i <= 5 && completedAt == 0; i++ {
		in := input("run1", i, cfg, host)
		in.Feedback = feedback
		res := iterate(t, e, in)
		if res.Error != "" {
			t.Fatalf("iteration %d: agent error %q\n%s", i, res.Error, res.Output)
		}
		results := checks.Run(ctx, cfg.Completion.Checks, checks.Env{Workdir: wd, Output: res.Output, Environ: e.Environ(in)})
		passed := results[0].Passed
		claimed := res.Promise != nil && res.Promise.Kind == spec.PromiseComplete
		d := spec.Decision{Decision: spec.DecisionContinue, Reasons: []string{"checks failing"}}
		switch {
		case claimed && passed:
			d = spec.Decision{Decision: spec.DecisionComplete, StopReason: "completed", Reasons: []string{"all checks pass"}}
			completedAt = i
		case claimed:
			d.FalseCompletion = true
			d.Reasons = []string{"completion claimed but checks fail"}
		}
		switch i {
		case 1:
			if !claimed || passed {
				t.Fatalf("iteration 1: want a false completion claim, got promise %+v, check %+v", res.Promise, results[0])
			}
		case 2:
			if claimed || passed || !strings.Contains(results[0].OutputTail, "TestMul") {
				t.Fatalf("iteration 2: promise %+v, check %+v", res.Promise, results[0])
			}
		}
		if err := e.AfterGate(ctx, in, res, results, d); err != nil {
			t.Fatalf("AfterGate: %v", err)
		}
		diffs = append(diffs, res.DiffHash)
		var failing []spec.CheckResult
		for _, r := range results {
			if !r.Passed {
				failing = append(failing, r)
			}
		}
		feedback = &spec.Feedback{Decision: d.Decision, Reasons: d.Reasons, FailingChecks: failing}
	}
	if completedAt != 3 {
		t.Fatalf("completed at iteration %d, want 3", completedAt)
	}
	if diffs[0] == diffs[1] || diffs[1] == diffs[2] {
		t.Errorf("diff hashes did not change with the code: %v", diffs)
	}

	// The second prompt carried the gate's feedback and the progress log.
	p2, err := os.ReadFile(filepath.Join(wd, ".homework", "prompt-2.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Make the tests pass.", "completion claimed but checks fail", "TestAdd", "## Iteration 1", "<promise>COMPLETE</promise>"} {
		if !strings.Contains(string(p2), s) {
			t.Errorf("prompt 2 lacks %q:\n%s", s, p2)
		}
	}
	progress, err := os.ReadFile(filepath.Join(wd, ".homework", "progress.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Iteration 1", "## Iteration 3", "Decision: complete", "Checks: 0/1 passed; failing: tests", "Checks: 1/1 passed"} {
		if !strings.Contains(string(progress), s) {
			t.Errorf("progress.txt lacks %q:\n%s", s, progress)
		}
	}
}
