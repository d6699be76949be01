package engine

import "time"

// DefaultRunningTime is the running-time budget a run gets when it sets
// none, for forms that state it.
func (e *Engine) DefaultRunningTime() time.Duration { return e.opts.DefaultRunningTime }
