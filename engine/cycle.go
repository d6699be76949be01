package engine

import (
	"fmt"
	"strings"

	"homework/engine/spec"
)

// Cycle breaker: an agent that flips its work between two to four states
// (fix one check, break the other; undo; redo) never repeats the same
// fingerprint twice in a row, so the stall breakers miss it. It does repeat
// a block of fingerprints.
const (
	// DefaultCycles is how many times a block of iteration fingerprints
	// must repeat back to back to count as a cycle.
	DefaultCycles = 3
	// MinCyclePeriod and MaxCyclePeriod bound the block length looked for.
	MinCyclePeriod = 2
	MaxCyclePeriod = 4
	// MaxCycles bounds breakers.cycles so a cycle fits the history the gate
	// is given.
	MaxCycles = 5
	// historyDepth is how many earlier iterations the gate sees.
	historyDepth = MaxCyclePeriod * MaxCycles
)

// detectCycle reports the shortest period p in [minPeriod, maxPeriod] such
// that the newest p*cycles fingerprints (fps is newest first) are one block
// of p fingerprints repeated cycles times, the block holding at least two
// different values (one value repeated is a stall, the other breakers' job).
// Empty fingerprints never form a cycle.
func detectCycle(fps []string, minPeriod, maxPeriod, cycles int) (period int, ok bool) {
	if cycles < 2 {
		return 0, false
	}
	for p := max(minPeriod, 2); p <= maxPeriod; p++ {
		n := p * cycles
		if len(fps) < n {
			break
		}
		distinct := false
		match := true
		for i := 0; i < n && match; i++ {
			if fps[i] == "" || fps[i] != fps[i%p] {
				match = false
			}
			if i < p && fps[i] != fps[0] {
				distinct = true
			}
		}
		if match && distinct {
			return p, true
		}
	}
	return 0, false
}

// cycleBreaker trips on a cycle in the progress fingerprints of the current
// iteration and its history (for command runs these cover the work
// directory's diff hash and the failing-check set; for LLM runs the
// workspace, task and check state). It returns the stop reason, the detail
// and the evidence, or "".
func cycleBreaker(in gateInput) (string, string, *spec.Evidence) {
	cycles := in.Config.Breakers.Cycles
	if cycles < 0 {
		return "", "", nil
	}
	if cycles == 0 {
		cycles = DefaultCycles
	}
	all := append([]spec.Signals{in.Signals}, in.History...)
	fps := make([]string, len(all))
	for i, s := range all {
		fps[i] = s.Progress
	}
	p, ok := detectCycle(fps, MinCyclePeriod, MaxCyclePeriod, cycles)
	if !ok {
		return "", "", nil
	}
	ev := &spec.Evidence{Breaker: "cycle", Threshold: cycles, Fingerprints: fps[:p*cycles],
		LastOutputHash: in.Signals.OutputHash, LastDiffHash: in.Signals.DiffHash,
		Pattern: fmt.Sprintf("period %d repeated %d times", p, cycles)}
	for i := 0; i < p; i++ {
		if all[i].Summary != "" {
			ev.LastSummaries = append(ev.LastSummaries, all[i].Summary)
		}
		if all[i].Failure != "" {
			ev.LastFailures = append(ev.LastFailures, all[i].Failure)
		}
	}
	return spec.StopNoProgress, fmt.Sprintf("going in circles: the last %d iterations repeat the same %d states %d times", p*cycles, p, cycles), ev
}

// validateCycles checks breakers.cycles: 0 (the default), -1 (off) or
// 2..MaxCycles.
func validateCycles(b spec.Breakers) error {
	if c := b.Cycles; c != 0 && c != -1 && (c < 2 || c > MaxCycles) {
		return spec.FieldError("breakers.cycles", "breakers.cycles must be between 2 and %d (or -1 to turn the cycle breaker off).", MaxCycles)
	}
	return nil
}

// repeatedErrorDetail is the repeated_error stop detail, quoting the
// newest occurrence of the error.
func repeatedErrorDetail(n int, failure string) string {
	d := fmt.Sprintf("the same error repeated %d times in a row", n)
	if failure = strings.TrimSpace(failure); failure != "" {
		d += ": " + truncate(failure, 300)
	}
	return d
}
