package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/renameio/v2"

	"homework/engine/spec"
)

const lastSummaryFile = "last-summary.txt"

// narrateTimeout bounds Narrate's reading of the work directory.
const narrateTimeout = 30 * time.Second

// saveLastSummary keeps the iteration's summary (the agent's final answer
// when its output format has one) for the run's report.
func (e *Executor) saveLastSummary(wd, runID, summary string) {
	if strings.TrimSpace(summary) == "" {
		return
	}
	if dir := ensureStateDir(wd, runID); dir != "" {
		renameio.WriteFile(filepath.Join(dir, lastSummaryFile), []byte(truncate(strings.TrimSpace(summary), 4000)), 0o644)
	}
}

// Narrate writes a finished command run's report summary: the agent's last
// summary, then what the run changed in the work directory since its first
// iteration (files created, modified and deleted, commits, the git diff
// stat). It implements engine.Narrator.
//
// It calls no model and only reads the work directory, so it is not held to
// the iteration's deadline that ctx carries (the run's last iteration may
// have used all of it): it has narrateTimeout of its own, and ends early
// only when ctx is canceled.
func (e *Executor) Narrate(ctx context.Context, run *spec.Run, cfg *spec.Config, report *spec.Report) (string, error) {
	if cfg == nil || cfg.Agent == nil || cfg.Agent.Workdir == "" {
		return "", nil
	}
	ctx, cancel := withoutDeadline(ctx, narrateTimeout)
	defer cancel()
	wd := cfg.Agent.Workdir
	var b strings.Builder
	if dir := stateDir(wd, run.ID); dir != "" {
		if s, err := os.ReadFile(filepath.Join(dir, lastSummaryFile)); err == nil && len(strings.TrimSpace(string(s))) > 0 {
			b.WriteString("The agent's last summary:\n\n")
			for l := range strings.SplitSeq(strings.TrimSpace(string(s)), "\n") {
				b.WriteString("> " + l + "\n")
			}
			b.WriteString("\n")
		}
	}
	ch, ok := e.RunChanges(ctx, wd, run.ID)
	if !ok {
		b.WriteString("What changed in the work directory is unknown: the run has no starting snapshot.")
		return b.String(), nil
	}
	fmt.Fprintf(&b, "What changed in %s over the run:\n\n%s", wd, ch.describe(50))
	if ch.DiffStat != "" {
		b.WriteString("\n\n```\n" + ch.DiffStat + "\n```")
	}
	return b.String(), nil
}

// withoutDeadline returns a context that ends after d, or when ctx is
// canceled, but not when ctx merely reaches its deadline.
func withoutDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithTimeoutCause(context.WithoutCancel(ctx), d, errors.New("agentcmd: narrate timed out"))
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return out, func() { stop(); cancel() }
}
