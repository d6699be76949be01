package engine

import (
	"errors"
	"strings"
	"testing"

	"homework/engine/spec"
)

func TestDetectCycle(t *testing.T) {
	split := func(s string) []string { // newest first
		if s == "" {
			return nil
		}
		return strings.Split(s, " ")
	}
	for _, tc := range []struct {
		name   string
		fps    string
		cycles int
		period int // 0: no cycle
	}{
		{"A B flipping three times is a period-2 cycle", "A B A B A B", 3, 2},
		{"A B flipping only twice and a half is not yet", "A B A B A", 3, 0},
		{"older history before the cycle does not matter", "A B A B A B C D", 3, 2},
		{"a cycle broken in the middle is not one", "A B A C A B", 3, 0},
		{"the same fingerprint over and over is a stall, not a cycle", "A A A A A A", 3, 0},
		{"three states in turn is a period-3 cycle", "A B C A B C A B C", 3, 3},
		{"A A B repeated is a period-3 cycle", "A A B A A B A A B", 3, 3},
		{"four states in turn is a period-4 cycle", "A B C D A B C D A B C D", 3, 4},
		{"five states in turn are beyond the largest period", "A B C D E A B C D E A B C D E", 3, 0},
		{"two cycles are enough when configured so", "A B A B", 2, 2},
		{"empty fingerprints never cycle", " B  B  B", 3, 0},
		{"steady progress has no cycle", "F E D C B A", 3, 0},
		{"a period-2 cycle is found before its period-4 multiple", "A B A B A B A B A B A B", 3, 2},
		{"fewer than two cycles never trip", "A B", 1, 0},
		{"no history", "", 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := detectCycle(split(tc.fps), MinCyclePeriod, MaxCyclePeriod, tc.cycles)
			if ok != (tc.period != 0) || p != tc.period {
				t.Errorf("detectCycle(%q, cycles %d) = %d, %v; want period %d", tc.fps, tc.cycles, p, ok, tc.period)
			}
		})
	}
}

func TestCycleBreakerInTheGate(t *testing.T) {
	for _, x := range []string{spec.ExecutorCommand, spec.ExecutorLLM} {
		t.Run(x, func(t *testing.T) { testCycleBreaker(t, x) })
	}
}

func testCycleBreaker(t *testing.T, executor string) {
	cfg := &spec.Config{Executor: executor, Mode: spec.ModeAuto}
	sig := func(fp, summary string) spec.Signals {
		return spec.Signals{Progress: fp, Summary: summary, Failure: "check " + fp + " failing"}
	}
	history := []spec.Signals{sig("B", "broke b"), sig("A", "fixed b"), sig("B", "broke b"), sig("A", "fixed b"), sig("B", "broke b")}
	in := gateInput{Config: cfg, Iteration: 6, Result: &spec.Result{}, Signals: sig("A", "fixed b"), History: history}
	d := decide(in)
	if d.Decision != spec.DecisionStop || d.StopReason != spec.StopNoProgress {
		t.Fatalf("decision %+v, want stop for no_progress", d)
	}
	if !strings.Contains(strings.Join(d.Reasons, "\n"), "going in circles") || !strings.Contains(string(d.Evidence), `"breaker":"cycle"`) ||
		!strings.Contains(string(d.Evidence), "period 2 repeated 3 times") || !strings.Contains(string(d.Evidence), "check B failing") {
		t.Errorf("reasons %q evidence %s", d.Reasons, d.Evidence)
	}

	in.History = history[:4]
	if d := decide(in); d.Decision != spec.DecisionContinue {
		t.Errorf("five iterations of flipping: %+v, want continue", d)
	}
	in.History = history
	cfg.Breakers.Cycles = -1
	if d := decide(in); d.Decision != spec.DecisionContinue {
		t.Errorf("with the cycle breaker off: %+v, want continue", d)
	}
}

func TestValidateCycles(t *testing.T) {
	for c, ok := range map[int]bool{0: true, -1: true, 2: true, MaxCycles: true, 1: false, -2: false, MaxCycles + 1: false} {
		err := validateCycles(spec.Breakers{Cycles: c})
		if (err == nil) != ok {
			t.Errorf("cycles %d: err %v, want ok %v", c, err, ok)
		}
		var de *spec.Error
		if err != nil && (!errors.As(err, &de) || de.Code != spec.EINVALID || de.Field != "breakers.cycles") {
			t.Errorf("cycles %d: error %#v is not an EINVALID field error on breakers.cycles", c, err)
		}
	}
}
