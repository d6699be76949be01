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
		var d map[string]json.RawMessage
		json.Unmarshal(e.Data, &d)
		str := func(k string) string {
			var v string
			if json.Unmarshal(d[k], &v) == nil {
				return v
			}
			var list []string
			json.Unmarshal(d[k], &list)
			return strings.Join(list, " · ")
		}
		num := func(k string) int {
			var v int
			json.Unmarshal(d[k], &v)
			return v
		}
		a := &views.Action{At: e.CreatedAt, Kind: e.Type}
		switch e.Type {
		case "iteration_started":
			cur = num("iteration")
			if num("inbox") > 0 {
				for _, m := range unread {
					m.Text += fmt.Sprintf(" — read by iteration %d", cur)
				}
				unread = nil
				if i, ok := byIter[cur]; ok {
					its[i].Inbox = num("inbox")
				}
			}
			continue
		case "run_waiting_on_user":
			waitReason = str("reason")
			var qs []string
			json.Unmarshal(d["questions"], &qs)
			switch waitReason {
			case "approve_plan":
				a.Text = "Waiting for your approval of the plan"
			case "turn_ended":
				a.Text = "Turn ended; waiting for you"
			default:
				a.Text = "Asked you"
			}
			if len(qs) > 0 {
				a.Text += ": " + strings.Join(qs, " · ")
			}
		case "user_response":
			a.Text = "You answered: " + str("answers")
			if waitReason == "approve_plan" {
				a.Text = "You approved the plan: " + str("answers")
			}
			waitReason = ""
		case "message_queued":
			a.Text = "You queued a message: " + str("body")
			unread = append(unread, a)
		case "run_stopped", "run_stalled", "run_completed", "run_failed", "run_canceled":
			var stop spec.StopReason
			json.Unmarshal(d["stop_reason"], &stop)
			a.Text = stopText(e.Type, stop, who)
		case "run_continued":
			var b spec.Budgets
			json.Unmarshal(d["budgets"], &b)
			a.Text = "Continued"
			if raised := raisedBudgets(b); raised != "" {
				a.Text += " with budgets raised: " + raised
			}
		case "run_recovered":
			a.Text = fmt.Sprintf("Recovered after the server stopped: iteration %d runs again (attempt %d)", num("iteration"), num("attempt"))
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

func stopText(typ string, stop spec.StopReason, who string) string {
	detail := stop.Detail
	switch typ {
	case "run_canceled":
		return "Canceled by " + who
	case "run_completed":
		return "Completed" + dashed(detail)
	case "run_failed":
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
