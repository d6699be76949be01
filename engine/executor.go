package engine

import (
	"context"

	"homework/engine/spec"
)

// Executor runs one bounded iteration of a run. It must return promptly when
// ctx is cancelled (cancel, timeout, shutdown).
type Executor interface {
	Iterate(ctx context.Context, in *spec.Input) (*spec.Result, error)
}

// ConfigValidator is implemented by executors that validate their part of a
// run's configuration when the run is created. Errors should be *spec.Error
// with a field.
type ConfigValidator interface {
	ValidateConfig(ctx context.Context, user *spec.User, cfg *spec.Config) error
}

// RunStarter is implemented by executors that prepare a run the first time
// it starts (the research workspace), inside the transaction that moves it to
// running. It may set run.WorkspaceDocID.
type RunStarter interface {
	StartRun(ctx context.Context, tx spec.Tx, run *spec.Run, cfg *spec.Config) error
}

// GateObserver is implemented by executors that keep their own memory of
// each iteration's outcome (a command agent's progress.txt, an optional git
// commit). It is called after the gate decided and before the decision
// commits, so the next iteration (enqueued by that commit) sees it.
type GateObserver interface {
	AfterGate(ctx context.Context, in *spec.Input, res *spec.Result, checks []spec.CheckResult, d spec.Decision) error
}

// Narrator is implemented by executors that write a finished run's report
// narrative (the LLM summarizer). A failure leaves the report without one.
type Narrator interface {
	Narrate(ctx context.Context, run *spec.Run, cfg *spec.Config, report *spec.Report) (string, error)
}

// CheckEnvironment is implemented by executors that say which environment
// command checks get (the same allow-list as their agent). Without it
// command checks get only a minimal environment.
type CheckEnvironment interface {
	Environ(in *spec.Input) []string
}
