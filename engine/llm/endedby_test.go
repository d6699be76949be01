package llm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

// TestAnIterationCutByABudgetSaysSo: the summary and error of an iteration
// the engine cut short name the cause it gave (a cost budget used up), and
// only an iteration whose time ran out says it ran out of time.
func TestAnIterationCutByABudgetSaysSo(t *testing.T) {
	ended := func(t *testing.T, ctx context.Context) (summary, errText string) {
		t.Helper()
		sc := &scope{modelErr: &ModelError{Message: "context canceled", Err: ctx.Err()}}
		res := &spec.Result{}
		recordModelError(ctx, res, sc.modelErr)
		return outcomeSummary(ctx, sc), res.Error
	}
	t.Run("a cost budget cut names the budget, not the time", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errors.New("budget used up during the iteration: Used the cost budget ($0.0120 of $0.0100)."))
		summary, errText := ended(t, ctx)
		for _, s := range []string{summary, errText} {
			if strings.Contains(s, "ran out of time") || !strings.Contains(s, "Used the cost budget ($0.0120 of $0.0100).") {
				t.Fatalf("a cost-budget cut reads %q", s)
			}
		}
	})
	t.Run("a deadline is running out of time", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
		defer cancel()
		<-ctx.Done()
		summary, errText := ended(t, ctx)
		if !strings.Contains(summary, "(the iteration ran out of time)") || errText != "the iteration ran out of time" {
			t.Fatalf("a timed-out iteration reads %q / %q", summary, errText)
		}
	})
}
