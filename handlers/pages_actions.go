package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"homework/engine/spec"
	"homework/views"
)

// attachActions adds to each iteration view the person's and the
// platform's actions that happened while it was the run's latest
// iteration: questions and answers, messages (and which iteration read
// them), stops, continues, cancels, recoveries. They are read from the
// run's events from the first shown iteration's start on.
func attachActions(ctx context.Context, r spec.ReadStore, run *spec.Run, who string, its []views.IterationView) error {
	if len(its) == 0 || its[0].StartedAt.IsZero() {
		return nil
	}
	evs, err := r.ListRunActions(ctx, run.ID, its[0].StartedAt)
	if err != nil {
		return err
	}
	byIter := map[int]int{}
	for i, iv := range its {
		byIter[iv.Iteration] = i
	}
	cur := its[0].Iteration
	var unread []*views.Action // messages not yet read by an iteration
	var waitReason string
	for _, e := range evs {
		a := &views.Action{At: e.CreatedAt, Kind: string(e.Type)}
		switch e.Type {
		case spec.EventIterationStarted:
			var d spec.IterationStartedData
			json.Unmarshal(e.Data, &d)
			cur = d.Iteration
			if d.Inbox > 0 {
				for _, m := range unread {
					m.Text += fmt.Sprintf(" — read by iteration %d", cur)
				}
				unread = nil
				if i, ok := byIter[cur]; ok {
					its[i].Inbox = d.Inbox
				}
			}
			continue
		case spec.EventRunWaitingOnUser:
			var d spec.StatusData
			json.Unmarshal(e.Data, &d)
			waitReason = d.Reason
			switch waitReason {
			case spec.WaitApprovePlan:
				a.Text = "Waiting for your approval of the plan"
			case spec.WaitTurnEnded:
				a.Text = "Turn ended; waiting for you"
			default:
				a.Text = "Asked you"
			}
			if len(d.Questions) > 0 {
				a.Text += ": " + strings.Join(d.Questions, " · ")
			}
		case spec.EventUserResponse:
			var d spec.UserResponseData
			json.Unmarshal(e.Data, &d)
			answers := strings.Join(d.Answers, " · ")
			a.Text = "You answered: " + answers
			if waitReason == spec.WaitApprovePlan {
				a.Text = "You approved the plan: " + answers
			}
			waitReason = ""
		case spec.EventMessageQueued:
			var d spec.MessageQueuedData
			json.Unmarshal(e.Data, &d)
			a.Text = "You queued a message: " + d.Body
			unread = append(unread, a)
		case spec.EventRunStopped, spec.EventRunStalled, spec.EventRunCompleted, spec.EventRunFailed, spec.EventRunCanceled:
			var d spec.StatusData
			json.Unmarshal(e.Data, &d)
			var stop spec.StopReason
			if d.StopReason != nil {
				stop = *d.StopReason
			}
			a.Text = stopText(e.Type, stop, who)
		case spec.EventRunContinued:
			var d spec.RunContinuedData
			json.Unmarshal(e.Data, &d)
			a.Text = "Continued"
			if raised := raisedBudgets(d.Budgets); raised != "" {
				a.Text += " with budgets raised: " + raised
			}
		case spec.EventRunRecovered:
			var d spec.AttemptData
			json.Unmarshal(e.Data, &d)
			a.Text = fmt.Sprintf("Recovered after the server stopped: iteration %d runs again (attempt %d)", d.Iteration, d.Attempt)
		}
		i, ok := byIter[cur]
		if !ok {
			i = len(its) - 1
			if cur < its[0].Iteration {
				i = 0
			}
		}
		its[i].Actions = append(its[i].Actions, a)
	}
	return nil
}

func stopText(typ spec.EventType, stop spec.StopReason, who string) string {
	detail := stop.Detail
	switch typ {
	case spec.EventRunCanceled:
		return "Canceled by " + who
	case spec.EventRunCompleted:
		return "Completed" + dashed(detail)
	case spec.EventRunFailed:
		return "Failed" + dashed(detail)
	}
	return "Stopped: " + views.Humanize(stop.Type) + dashed(detail)
}

func dashed(s string) string {
	if s == "" {
		return ""
	}
	return " — " + s
}

// raisedBudgets lists the budgets a Continue set.
func raisedBudgets(b spec.Budgets) string {
	var parts []string
	if b.MaxIterations > 0 {
		parts = append(parts, fmt.Sprintf("iterations %d", b.MaxIterations))
	}
	if b.MaxRunningMS > 0 {
		parts = append(parts, fmt.Sprintf("time %s", views.Duration(msDur(b.MaxRunningMS))))
	}
	if b.MaxCostUSD > 0 {
		parts = append(parts, fmt.Sprintf("cost %s", views.Money(b.MaxCostUSD)))
	}
	if b.MaxTotalTokens > 0 {
		parts = append(parts, fmt.Sprintf("tokens %s", views.Count(b.MaxTotalTokens)))
	}
	if b.MaxToolCalls > 0 {
		parts = append(parts, fmt.Sprintf("tool calls %d", b.MaxToolCalls))
	}
	return strings.Join(parts, ", ")
}

func msDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
