package engine

import "homework/engine/spec"

// usageUnknownWait returns the wait of a run whose token or cost budget the
// iteration could not be held to, or nil: its usage could not be read (a
// token or cost budget), or its cost could not (a cost budget). Going on
// would spend without counting, so the person decides; the question names
// the iteration and why.
func usageUnknownWait(in gateInput, reasons []string, falseCompletion bool) *spec.Decision {
	res, b := in.Result, in.Config.Budgets
	why := ""
	switch {
	case res.UsageUnknown != "" && (b.MaxCostUSD > 0 || b.MaxTotalTokens > 0):
		why = res.UsageUnknown
	case res.CostUnknown != "" && b.MaxCostUSD > 0:
		why = res.CostUnknown
	default:
		return nil
	}
	q := why + ". The run's budget cannot be kept without it: answer to go on (what was not read is not counted), or cancel the run."
	return &spec.Decision{Decision: spec.DecisionWait, WaitReason: spec.WaitUsageUnknown, Questions: []string{q},
		FalseCompletion: falseCompletion, Reasons: append(reasons, "usage unknown: "+why)}
}
