package agentcmd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"homework/engine/spec"
)

// StopReadOnlyViolation is the stop reason of a read_only run (or an
// approve_plan run's planning iteration) whose agent changed the work
// directory anyway.
const StopReadOnlyViolation = spec.StopReadOnlyViolation

// PlanFile is where an approve_plan run's agent may write its plan.
const PlanFile = ".homework/plan.md"

// planPhase reports whether this iteration only plans: an approve_plan run's
// first iteration, before the person answered.
func planPhase(in *spec.Input) bool {
	if in.Config.Permissions.WriteMode != spec.WriteApprovePlan || in.Iteration > 1 {
		return false
	}
	for _, it := range in.Inbox {
		if it.Kind == "answer" {
			return false
		}
	}
	return true
}

// readOnlyPhase reports whether this iteration must leave the work
// directory as it found it.
func readOnlyPhase(in *spec.Input) bool {
	return in.Config.Permissions.WriteMode == spec.WriteReadOnly || planPhase(in)
}

// writeModeText is what the prompt says about the write mode; "" for
// autopilot.
func writeModeText(in *spec.Input) string {
	switch {
	case planPhase(in):
		return "This iteration is for planning only (write mode approve_plan): do not create, modify or delete any file in the work directory. " +
			"Write your plan to " + PlanFile + " (or print it as your reply); the person approves it before the work starts. " +
			"Do not print the completion promise in this iteration."
	case in.Config.Permissions.WriteMode == spec.WriteReadOnly:
		return "This run is read_only: read files and run commands that change nothing, but do not create, modify or delete any file in the work directory " +
			"(only .homework/ is yours). An iteration that changes the work directory stops the run. Report your findings in your reply."
	case in.Config.Permissions.WriteMode == spec.WriteApprovePlan:
		return "The person approved the plan (see their answer and " + PlanFile + "); carry it out."
	}
	return ""
}

// enforceWriteMode applies the write mode to an iteration's result given
// what it changed (known false when that could not be determined).
func enforceWriteMode(in *spec.Input, wd string, res *spec.Result, ch Changes, known bool) {
	if readOnlyPhase(in) && known && !ch.Empty() {
		mode := "read_only"
		if planPhase(in) {
			mode = "approve_plan (planning iteration)"
		}
		detail := fmt.Sprintf("The agent changed the work directory in a %s iteration: %s", mode, oneLine(ch.describe(10), 600))
		ev, _ := json.Marshal(map[string]any{"breaker": StopReadOnlyViolation, "write_mode": in.Config.Permissions.WriteMode, "changes": ch})
		res.Fatal = &spec.Fatal{Type: StopReadOnlyViolation, Detail: detail, Evidence: ev}
		res.Error = detail
		res.ErrorFingerprint = StopReadOnlyViolation
		res.Summary = truncate(detail+"\n"+res.Summary, 2*summaryBytes)
		return
	}
	if !planPhase(in) {
		return
	}
	if res.Promise != nil && res.Promise.Kind == spec.PromiseComplete {
		res.Promise = nil // nothing is done before the plan is approved
	}
	plan := ""
	if b, err := os.ReadFile(filepath.Join(wd, filepath.FromSlash(PlanFile))); err == nil {
		plan = strings.TrimSpace(string(b))
	}
	where := "The agent's plan is in " + PlanFile
	if plan == "" {
		plan = strings.TrimSpace(res.Output)
		where = "The agent's plan (its reply)"
	}
	res.WaitForApproval = fmt.Sprintf("%s. Answer to approve it (or say what to change); the run proceeds after your answer.\n\n%s", where, truncate(plan, 4000))
}
