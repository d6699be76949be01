package engine

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"homework/engine/spec"
	"homework/engine/text"
)

// storeUnavailableFP is the error fingerprint of an iteration that failed
// because the database could not be reached.
const storeUnavailableFP = "store:unavailable"

// outageFailure returns the stop reason naming an outage (the model
// endpoint's or the database's) by an iteration's error fingerprint, or ""
// when fp is not one.
func outageFailure(fp string) string {
	if fp == storeUnavailableFP {
		return spec.StopStoreUnavailable
	}
	if toolUnavailable(fp) {
		return spec.StopToolUnavailable
	}
	return endpointFailure(fp)
}

// toolUnavailable reports whether fp is the fingerprint of an MCP server
// that could not be started ("mcp:unavailable:…", engine/llm) or crashed
// beyond its one restart ("tool:mcp__{server}__{tool}:unavailable:…").
func toolUnavailable(fp string) bool {
	if strings.HasPrefix(fp, "mcp:unavailable:") {
		return true
	}
	rest, ok := strings.CutPrefix(fp, "tool:mcp__")
	return ok && strings.Contains(rest, ":unavailable:")
}

// stopFor is the gate's stop when a budget ran out (after the iteration or
// during it) or a breaker tripped: stop with detail and evidence, unless the
// iteration failed on an outage. Then the outage names the stop, whatever
// ran out or tripped with it — raising a budget or a threshold would not
// help while the endpoint or the database is down — and the detail keeps
// both, with the outage's last error. This is the one place an outage
// takes precedence.
func stopFor(in gateInput, stop string, reasons []string, detail string, evidence *spec.Evidence, falseCompletion bool) spec.Decision {
	if named := outageFailure(in.Signals.ErrorFP); named != "" {
		what := "the model endpoint was unavailable"
		switch named {
		case spec.StopStoreUnavailable:
			what = "the database was unavailable"
		case spec.StopToolUnavailable:
			what = "an MCP server was unavailable"
		}
		detail = fmt.Sprintf("%s (last error: %s); at the same time: %s", what, text.Truncate(in.Result.Error, 300), detail)
		stop = named
	}
	d := spec.Decision{Decision: spec.DecisionStop, StopReason: stop, FalseCompletion: falseCompletion, Reasons: append(reasons, detail)}
	if evidence != nil {
		d.Evidence, _ = json.Marshal(evidence)
	}
	return d
}

// endpointFailure returns the stop reason naming a retryable model endpoint
// failure by its error fingerprint, or "" when fp is not one.
func endpointFailure(fp string) string {
	rest, ok := strings.CutPrefix(fp, "model:")
	if !ok {
		return ""
	}
	switch rest {
	case "http_429":
		return spec.StopRateLimited
	case "http_408", "http_425", "network", "timeout", "truncated_response", "malformed_response", "no_choices":
		return spec.StopModelUnavailable
	}
	if code, ok := strings.CutPrefix(rest, "http_"); ok && len(code) == 3 && code[0] == '5' {
		return spec.StopModelUnavailable
	}
	return ""
}

// Default breaker thresholds.
const (
	DefaultNoProgress    = 3
	DefaultRepeatedError = 5
	DefaultStallRepeats  = 3
)

// gateInput is everything the gate decides on.
type gateInput struct {
	Config    *spec.Config
	Iteration int
	Result    *spec.Result
	Checks    []spec.CheckResult
	Metrics   spec.Metrics // run totals including this iteration
	Signals   spec.Signals
	History   []spec.Signals // earlier iterations, newest first
	// Cut is the budget used up during the iteration, which ended it at
	// once (a spending budget after a model call, the running-time budget
	// at its deadline); nil when none was.
	Cut *budgetReason
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// computeSignals derives an iteration's signals from its result and checks.
func computeSignals(res *spec.Result, checks []spec.CheckResult) spec.Signals {
	s := spec.Signals{OutputHash: res.OutputHash, DiffHash: res.DiffHash, ErrorFP: res.ErrorFingerprint,
		Score: spec.Score(checks), HasChecks: len(checks) > 0, Summary: text.Truncate(res.Summary, 500)}
	var failing []string
	for _, c := range checks {
		if !c.Passed {
			failing = append(failing, c.Name+"\x00"+c.Type)
			if s.Failure == "" {
				s.Failure = text.Truncate(c.Name+": "+c.Message, 500)
			}
		}
	}
	sort.Strings(failing)
	if len(failing) > 0 {
		s.FailingChecks = hashStrings(failing...)
	}
	if res.Error != "" {
		s.Failure = text.Truncate(res.Error, 500)
	}
	var remaining []string
	if res.Status != nil {
		remaining = res.Status.RemainingWork
	}
	var passFail []string
	for _, c := range checks {
		passFail = append(passFail, fmt.Sprintf("%s=%t", c.Name, c.Passed))
	}
	s.Progress = hashStrings(res.Progress, strings.Join(passFail, ","), strings.Join(remaining, "\n"), res.ErrorFingerprint)
	return s
}

type budgetReason struct {
	stop   string
	field  string
	detail string
}

// budgetExceeded returns the first exhausted budget, if any.
func budgetExceeded(b spec.Budgets, m spec.Metrics) *budgetReason {
	switch {
	case b.MaxIterations > 0 && m.Iterations >= b.MaxIterations:
		return &budgetReason{spec.StopMaxIterations, "max_iterations", fmt.Sprintf("Reached the iteration budget (%d of %d).", m.Iterations, b.MaxIterations)}
	case b.MaxRunningMS > 0 && m.RunningMS >= b.MaxRunningMS:
		return &budgetReason{spec.StopBudgetTime, "max_running_ms", fmt.Sprintf("Used the running-time budget (%s of %s).", fmtMS(m.RunningMS), fmtMS(b.MaxRunningMS))}
	case b.MaxTotalTokens > 0 && m.TokensTotal >= b.MaxTotalTokens:
		return &budgetReason{spec.StopBudgetTokens, "max_total_tokens", fmt.Sprintf("Used the token budget (%d of %d tokens).", m.TokensTotal, b.MaxTotalTokens)}
	case b.MaxCostUSD > 0 && m.CostTotalUSD >= b.MaxCostUSD:
		return &budgetReason{spec.StopBudgetCost, "max_cost_usd", fmt.Sprintf("Used the cost budget (%s of %s).", usd(m.CostTotalUSD), usd(b.MaxCostUSD))}
	case b.MaxToolCalls > 0 && m.ToolCallsTotal >= b.MaxToolCalls:
		return &budgetReason{spec.StopBudgetToolCalls, "max_tool_calls", fmt.Sprintf("Used the tool-call budget (%d of %d).", m.ToolCallsTotal, b.MaxToolCalls)}
	}
	return nil
}

func fmtMS(ms int64) string {
	s := ms / 1000
	if s < 60 {
		return fmt.Sprintf("%ds", s)
	}
	return fmt.Sprintf("%dm%02ds", s/60, s%60)
}

// decide is the gate: given an iteration's outcome it returns continue,
// complete, wait, stop or fail, with the reasons a person reads.
func decide(in gateInput) spec.Decision {
	res, cfg := in.Result, in.Config
	var failing []spec.CheckResult
	for _, c := range in.Checks {
		if !c.Passed {
			failing = append(failing, c)
		}
	}
	if res.Fatal != nil {
		return spec.Decision{Decision: spec.DecisionStop, StopReason: cmp.Or(res.Fatal.Type, spec.StopError),
			Reasons: []string{res.Fatal.Detail}, Evidence: res.Fatal.Evidence}
	}
	if c := in.Cut; c != nil {
		return stopFor(in, c.stop, nil, c.detail+" The iteration was ended as soon as it was.", nil, false)
	}
	claimed, complete, refused := judgeCompletion(in, failing)
	if complete != nil {
		return *complete
	}
	var reasons []string
	if refused != "" {
		reasons = append(reasons, refused)
	}
	falseCompletion := claimed && len(reasons) > 0
	if d := requestedWait(res, reasons, falseCompletion); d != nil {
		return *d
	}
	reasons = append(reasons, notDoneReasons(in, failing, claimed)...)
	if b := budgetExceeded(cfg.Budgets, in.Metrics); b != nil {
		return stopFor(in, b.stop, reasons, b.detail, nil, falseCompletion)
	}
	if d := usageUnknownWait(in, reasons, falseCompletion); d != nil {
		return *d
	}
	if stop, detail, evidence := breakers(in); stop != "" {
		return stopFor(in, stop, reasons, detail, evidence, falseCompletion)
	}
	if cfg.Mode == spec.ModeInteractive {
		return spec.Decision{Decision: spec.DecisionWait, WaitReason: spec.WaitTurnEnded, FalseCompletion: falseCompletion,
			Reasons: append(reasons, "interactive mode: the turn ended; your move")}
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "work remains")
	}
	if res.Status != nil && len(res.Status.RemainingWork) > 0 {
		reasons = append(reasons, "remaining: "+text.Truncate(strings.Join(res.Status.RemainingWork, "; "), 300))
	}
	return spec.Decision{Decision: spec.DecisionContinue, FalseCompletion: falseCompletion, Reasons: reasons}
}

// judgeCompletion weighs a completion claim: the explicit signal AND
// evidence AND the completion token (when set) AND every check passing AND
// no iteration error. It returns whether completion was claimed, the
// complete decision when the claim holds, and otherwise why it was refused
// ("" when nothing was claimed).
func judgeCompletion(in gateInput, failing []spec.CheckResult) (claimed bool, complete *spec.Decision, refused string) {
	res, cfg := in.Result, in.Config
	evidence := false
	if res.Status != nil && res.Status.ExitSignal {
		claimed = true
		evidence = len(nonEmpty(res.Status.CompletionEvidence)) > 0
	}
	if res.Promise != nil && res.Promise.Kind == spec.PromiseComplete {
		claimed = true
		evidence = evidence || strings.TrimSpace(res.Output) != ""
	}
	if !claimed {
		return false, nil, ""
	}
	var why []string
	if !evidence {
		why = append(why, "completion was claimed without evidence")
	}
	if tok := cfg.Completion.Token; tok != "" && !strings.Contains(res.Output, tok) && !containsAny(statusEvidence(res), tok) {
		why = append(why, fmt.Sprintf("the completion token %q was not given", tok))
	}
	for _, c := range failing {
		why = append(why, fmt.Sprintf("check %q failed: %s", c.Name, text.Truncate(c.Message, 300)))
	}
	if res.Error != "" {
		why = append(why, "the iteration ended with an error: "+text.Truncate(res.Error, 300))
	}
	if len(why) == 0 {
		r := []string{"completion was signalled with evidence"}
		if len(in.Checks) > 0 {
			r = append(r, fmt.Sprintf("all %d checks passed", len(in.Checks)))
		}
		return true, &spec.Decision{Decision: spec.DecisionComplete, StopReason: spec.StopCompleted, Reasons: r}, ""
	}
	return true, nil, "completion claim refused: " + strings.Join(why, "; ")
}

// requestedWait returns the wait the agent asked for (input, BLOCKED, plan
// approval), or nil.
func requestedWait(res *spec.Result, reasons []string, falseCompletion bool) *spec.Decision {
	if res.Status != nil && res.Status.NeedsUserInput {
		q := nonEmpty(res.Status.BlockingQuestions)
		return &spec.Decision{Decision: spec.DecisionWait, WaitReason: spec.WaitNeedsInput, Questions: q, FalseCompletion: falseCompletion,
			Reasons: append(reasons, "the agent needs your input")}
	}
	if res.Promise != nil && res.Promise.Kind == spec.PromiseBlocked {
		reason := strings.TrimSpace(res.Promise.Reason)
		if reason == "" {
			reason = "the agent reported BLOCKED without a reason"
		}
		return &spec.Decision{Decision: spec.DecisionWait, WaitReason: spec.WaitBlocked, Questions: []string{reason},
			FalseCompletion: falseCompletion, Reasons: append(reasons, "the agent is blocked: "+reason)}
	}
	if res.WaitForApproval != "" {
		return &spec.Decision{Decision: spec.DecisionWait, WaitReason: spec.WaitApprovePlan, Questions: []string{res.WaitForApproval},
			Reasons: append(reasons, "the plan waits for your approval")}
	}
	return nil
}

// notDoneReasons says why an iteration that did not complete is not done:
// a missing status report, an error, failing checks (already listed when a
// claim was refused).
func notDoneReasons(in gateInput, failing []spec.CheckResult, claimed bool) []string {
	res := in.Result
	var reasons []string
	if res.Status == nil && res.Promise == nil && in.Config.Executor == spec.ExecutorLLM {
		reasons = append(reasons, "not done: the iteration ended without report_status")
	}
	if res.Error != "" {
		reasons = append(reasons, "iteration error: "+text.Truncate(res.Error, 300))
	}
	if !claimed {
		for _, c := range failing {
			reasons = append(reasons, fmt.Sprintf("check %q failing: %s", c.Name, text.Truncate(c.Message, 300)))
		}
	}
	return reasons
}

// breakers returns the stop reason of the first tripped breaker with its
// evidence, or "".
func breakers(in gateInput) (string, string, *spec.Evidence) {
	cfg := in.Config
	all := append([]spec.Signals{in.Signals}, in.History...) // newest first
	ev := func(name string, n int, fps []string) *spec.Evidence {
		e := &spec.Evidence{Breaker: name, Threshold: n, Fingerprints: fps,
			LastOutputHash: in.Signals.OutputHash, LastDiffHash: in.Signals.DiffHash}
		for i := 0; i < len(all) && i < 3; i++ {
			if all[i].Summary != "" {
				e.LastSummaries = append(e.LastSummaries, all[i].Summary)
			}
			if all[i].Failure != "" {
				e.LastFailures = append(e.LastFailures, all[i].Failure)
			}
		}
		return e
	}
	if in.Result.Stuck != "" {
		e := ev("stuck", 1, nil)
		e.Pattern = in.Result.Stuck
		return spec.StopStuck, "stuck: " + in.Result.Stuck, e
	}
	same := func(n int, get func(spec.Signals) string) ([]string, bool) {
		if n <= 0 || len(all) < n {
			return nil, false
		}
		first := get(all[0])
		if first == "" {
			return nil, false
		}
		var fps []string
		for i := 0; i < n; i++ {
			if get(all[i]) != first {
				return nil, false
			}
			fps = append(fps, get(all[i]))
		}
		return fps, true
	}
	if n := orInt(cfg.Breakers.RepeatedError, DefaultRepeatedError); n > 0 {
		if fps, ok := same(n, func(s spec.Signals) string { return s.ErrorFP }); ok {
			return spec.StopRepeatedError, repeatedErrorDetail(n, in.Signals.Failure), ev("repeated_error", n, fps)
		}
	}
	if cfg.Executor == spec.ExecutorCommand {
		n := orInt(cfg.Breakers.StallRepeats, DefaultStallRepeats)
		for _, k := range []struct {
			name string
			get  func(spec.Signals) string
		}{
			{"output hash", func(s spec.Signals) string { return s.OutputHash }},
			{"diff hash", func(s spec.Signals) string { return s.DiffHash }},
			{"failing checks", func(s spec.Signals) string { return s.FailingChecks }},
		} {
			if fps, ok := same(n, k.get); ok {
				return spec.StopNoProgress, fmt.Sprintf("stalled: the same %s %d times in a row", k.name, n), ev("stall_"+strings.ReplaceAll(k.name, " ", "_"), n, fps)
			}
		}
	}
	if stop, detail, e := cycleBreaker(in); stop != "" {
		return stop, detail, e
	}
	if n := orInt(cfg.Breakers.NoProgress, DefaultNoProgress); n > 0 {
		if fps, ok := same(n, func(s spec.Signals) string { return s.Progress }); ok {
			return spec.StopNoProgress, fmt.Sprintf("no progress for %d iterations in a row", n), ev("no_progress", n, fps)
		}
	}
	if cfg.Breakers.QualityRegression == nil || *cfg.Breakers.QualityRegression {
		if len(all) >= 3 && all[0].HasChecks && all[1].HasChecks && all[2].HasChecks {
			a, b, c := all[2].Score, all[1].Score, all[0].Score // oldest to newest
			if b < a && c < b && a-c > 10 {
				e := ev("quality_regression", 3, nil)
				e.Scores = []float64{a, b, c}
				return spec.StopQualityRegression, fmt.Sprintf("check score fell three iterations in a row (%.0f → %.0f → %.0f)", a, b, c), e
			}
		}
	}
	return "", "", nil
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	return out
}

func statusEvidence(res *spec.Result) []string {
	if res.Status == nil {
		return nil
	}
	return res.Status.CompletionEvidence
}

func containsAny(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// maxRetryAfter bounds how long a Retry-After may hold a run back.
const maxRetryAfter = 15 * time.Minute

// endpointBackoff is how long the next iteration waits after this one (and
// the n-1 before it) failed on a retryable model endpoint error: jittered
// exponential from EndpointBackoffBase, capped at EndpointBackoffMax, and
// never shorter than the endpoint's Retry-After. 0 when this one did not.
func (e *Engine) endpointBackoff(out *outcome, history []spec.Signals) time.Duration {
	if endpointFailure(out.res.ErrorFingerprint) == "" {
		return 0
	}
	n := 1
	for _, s := range history {
		if endpointFailure(s.ErrorFP) == "" {
			break
		}
		n++
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(e.opts.EndpointBackoffBase),
		backoff.WithMultiplier(2), backoff.WithMaxInterval(e.opts.EndpointBackoffMax), backoff.WithMaxElapsedTime(0))
	var d time.Duration
	for range n {
		d = b.NextBackOff()
	}
	return max(min(d, e.opts.EndpointBackoffMax), min(out.res.RetryAfter, maxRetryAfter))
}
