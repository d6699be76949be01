package llm

import "fmt"

// step is one observed turn of a tool loop, for stuck detection.
type step struct {
	noAction    bool   // an assistant message without a tool call
	action      string // tool name and canonical arguments
	observation string // the tool's result
	errored     bool
}

// Stuck patterns (DESIGN §5), reported in Result.Stuck as "<pattern>: detail".
const (
	StuckRepeatedAction = "repeated_action" // same action and observation 4 times in a row
	StuckRepeatedError  = "repeated_error"  // same action erroring 3 times in a row
	StuckNoAction       = "no_action"       // 3 assistant messages in a row without an action
	StuckPingPong       = "ping_pong"       // A/B/A/B/A/B over the last 6 actions
)

// detectStuck returns the stuck pattern the tail of steps shows, or "".
func detectStuck(steps []step) string {
	n := len(steps)
	if n >= 3 {
		last := steps[n-3:]
		if last[0].noAction && last[1].noAction && last[2].noAction {
			return StuckNoAction + ": 3 assistant messages in a row without a tool call"
		}
		if !last[0].noAction && last[0].errored && last[1].errored && last[2].errored &&
			last[0].action == last[1].action && last[1].action == last[2].action {
			return fmt.Sprintf("%s: the same call failed 3 times in a row: %s", StuckRepeatedError, truncate(last[0].action, 200))
		}
	}
	if n >= 4 {
		last := steps[n-4:]
		same := !last[0].noAction
		for _, s := range last[1:] {
			same = same && s.action == last[0].action && s.observation == last[0].observation && !s.noAction
		}
		if same {
			return fmt.Sprintf("%s: the same call returned the same result 4 times in a row: %s", StuckRepeatedAction, truncate(last[0].action, 200))
		}
	}
	if n >= 6 {
		last := steps[n-6:]
		a, b := last[0].action, last[1].action
		ok := a != b
		for i, s := range last {
			want := a
			if i%2 == 1 {
				want = b
			}
			ok = ok && !s.noAction && s.action == want
		}
		if ok {
			return fmt.Sprintf("%s: alternating between two calls for 6 turns: %s / %s", StuckPingPong, truncate(a, 100), truncate(b, 100))
		}
	}
	return ""
}
