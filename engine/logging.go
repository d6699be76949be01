package engine

import (
	"context"
	"encoding/json"
	"log/slog"

	"homework/engine/spec"
)

func logLifecycle(log *slog.Logger, ev *spec.Event) {
	var d struct {
		Executor   string           `json:"executor"`
		Mode       string           `json:"mode"`
		Iteration  int              `json:"iteration"`
		Resumed    bool             `json:"resumed"`
		Reason     string           `json:"reason"`
		StopReason *spec.StopReason `json:"stop_reason"`
		Metrics    *spec.Metrics    `json:"metrics"`
	}
	msg, level := "", slog.LevelInfo
	switch ev.Type {
	case spec.EventRunCreated:
		msg = "run created"
	case spec.EventRunStarted:
		msg = "run started"
	case spec.EventRunWaitingOnUser:
		msg = "run waiting for the user"
	case spec.EventRunStopped, spec.EventRunStalled:
		msg = "run stopped"
	case spec.EventRunCompleted:
		msg = "run completed"
	case spec.EventRunCanceled:
		msg = "run canceled"
	case spec.EventRunFailed:
		msg, level = "run failed", slog.LevelWarn
	case spec.EventRunContinued:
		msg = "run continued"
	case spec.EventRunRecovered:
		msg, level = "run recovered after a crash", slog.LevelWarn
	default:
		return
	}
	json.Unmarshal(ev.Data, &d)
	attrs := []slog.Attr{slog.String("run", ev.RunID), slog.Int64("user", ev.UserID)}
	if d.Executor != "" {
		attrs = append(attrs, slog.String("executor", d.Executor), slog.String("mode", d.Mode))
	}
	if d.Iteration > 0 {
		attrs = append(attrs, slog.Int("iteration", d.Iteration))
	}
	if ev.Type == spec.EventRunStarted {
		attrs = append(attrs, slog.Bool("resumed", d.Resumed))
	}
	if d.Reason != "" {
		attrs = append(attrs, slog.String("reason", d.Reason))
	}
	if d.StopReason != nil {
		attrs = append(attrs, slog.String("stop_reason", d.StopReason.Type))
		if d.StopReason.Detail != "" {
			attrs = append(attrs, slog.String("detail", d.StopReason.Detail))
		}
	}
	if d.Metrics != nil {
		attrs = append(attrs, slog.Int("iterations", d.Metrics.Iterations), slog.Float64("cost_usd", d.Metrics.CostTotalUSD),
			slog.Int64("tokens", d.Metrics.TokensTotal))
	}
	log.LogAttrs(context.Background(), level, msg, attrs...)
}

// quietInfo is a slog handler that logs Info records at Debug: River
// reports its periodic maintenance (elections, schedulers, cleaners) at
// Info, which an operator does not want every few seconds. Warnings and
// errors pass unchanged.
type quietInfo struct{ slog.Handler }

func (q quietInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return q.Handler.Enabled(ctx, demote(l))
}

func (q quietInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return q.Handler.Handle(ctx, r)
}

func (q quietInfo) WithAttrs(as []slog.Attr) slog.Handler { return quietInfo{q.Handler.WithAttrs(as)} }
func (q quietInfo) WithGroup(name string) slog.Handler    { return quietInfo{q.Handler.WithGroup(name)} }

func demote(l slog.Level) slog.Level {
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

// riverLogger is the logger River gets: its Info lines at Debug.
func riverLogger(log *slog.Logger) *slog.Logger {
	return slog.New(quietInfo{log.With("component", "river").Handler()})
}
