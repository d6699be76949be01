package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"homework/engine/spec"
)

var notifyTitles = map[string]string{
	spec.StatusWaiting:   "Homework is waiting for you",
	spec.StatusCompleted: "Homework complete",
	spec.StatusStopped:   "Homework stopped",
	spec.StatusCanceled:  "Homework canceled",
	spec.StatusFailed:    "Homework failed",
}

// setStatus moves a run out of running (or queued) into status, appends the
// status event and a notification in tx. The caller promotes queued runs.
func (e *Engine) setStatus(ctx context.Context, tx spec.Tx, run *spec.Run, status string, stop *spec.StopReason, wait *spec.Waiting) error {
	run.Status = status
	run.StopReason = stop
	run.Waiting = wait
	run.LeaseOwner = ""
	run.LeaseUntil = time.Time{}
	run.RunningSince = time.Time{}
	if spec.IsTerminalStatus(status) {
		run.CompletedAt = tx.Now()
	}
	if err := tx.UpdateRun(ctx, run); err != nil {
		return err
	}
	data := spec.StatusData{Status: status, Iteration: run.Iteration, Metrics: run.Metrics, StopReason: stop}
	if wait != nil {
		data.Reason, data.Questions = wait.Reason, wait.Questions
		if wait.Reason == spec.WaitHostUnavailable {
			data.Detail = wait.Detail
		}
	}
	typ := spec.StatusEvent(status)
	if status == spec.StatusStopped && stop != nil && (stop.Type == spec.StopNoProgress || stop.Type == spec.StopStuck) {
		typ = spec.EventRunStalled
	}
	// The notification commits with the status; its event goes first so the
	// status event is the run's last.
	if err := e.notify(ctx, tx, run, status, stop, wait); err != nil {
		return err
	}
	// The deliveries commit with the status too: none is lost, none sent twice.
	if err := e.enqueueWebhooks(ctx, tx, run, status, wait); err != nil {
		return err
	}
	_, err := tx.AppendEvent(ctx, run.ID, typ, data)
	return err
}

func (e *Engine) notify(ctx context.Context, tx spec.Tx, run *spec.Run, status string, stop *spec.StopReason, wait *spec.Waiting) error {
	start := run.StartedAt
	if start.IsZero() {
		start = run.CreatedAt
	}
	duration := tx.Now().Sub(start).Milliseconds()
	// The message names the run, then says what it needs or why it ended.
	msg := truncate(strings.TrimSpace(strings.SplitN(run.Objective, "\n", 2)[0]), 80)
	switch {
	case wait != nil && len(wait.Questions) > 0:
		msg += " — " + truncate(wait.Questions[0], 200)
	case wait != nil && wait.Reason == spec.WaitTurnEnded:
		msg += " — the turn ended; reply or continue."
	case wait != nil && wait.Reason == spec.WaitHostUnavailable:
		msg += " — " + truncate(wait.Detail, 200)
	case stop != nil && stop.Detail != "":
		msg += " — " + truncate(stop.Detail, 200)
	}
	data, _ := json.Marshal(map[string]any{
		"run_id": run.ID, "status": status, "duration_ms": duration, "iterations": run.Metrics.Iterations,
		"tokens": run.Metrics.TokensTotal, "cost_usd": run.Metrics.CostTotalUSD,
	})
	n := &spec.Notification{UserID: run.UserID, RunID: run.ID, Kind: "run_" + status, Title: notifyTitles[status],
		Message: msg, ActionURL: "/runs/" + run.ID, Data: data}
	if err := tx.InsertNotification(ctx, n); err != nil {
		return err
	}
	_, err := tx.AppendEvent(ctx, run.ID, spec.EventNotificationCreated, spec.NotificationData{
		ID: n.ID, Kind: n.Kind, Title: n.Title, Message: n.Message, ActionURL: n.ActionURL,
	})
	return err
}

// finishRun ends a run that no iteration is ending (Cancel): report, status,
// notification.
func (e *Engine) finishRun(ctx context.Context, tx spec.Tx, run *spec.Run, status string, stop *spec.StopReason, wait *spec.Waiting) error {
	if err := e.writeReport(ctx, tx, run, status, stop, "", ""); err != nil {
		return err
	}
	return e.setStatus(ctx, tx, run, status, stop, wait)
}

// writeReport builds the run's report from what actually happened (iteration
// artifacts, documents, tasks, metrics) plus the narrative, and sets it on run.
func (e *Engine) writeReport(ctx context.Context, tx spec.Tx, run *spec.Run, status string, stop *spec.StopReason, narrative, narrativeErr string) error {
	r, err := e.buildReport(ctx, tx, run, status, stop, nil)
	if err != nil {
		return err
	}
	r.Summary = narrative
	r.NarrativeError = narrativeErr
	run.Report = r
	return nil
}

// buildReport builds the report from the stored iterations; pending, when
// set, is the artifacts of an iteration not yet stored (the one ending the
// run while the summarizer is asked for the narrative).
func (e *Engine) buildReport(ctx context.Context, tx spec.Tx, run *spec.Run, status string, stop *spec.StopReason, pending *spec.Artifacts) (*spec.Report, error) {
	r := &spec.Report{
		Title:     reportTitle(status, run.Objective),
		Objective: run.Objective,
		Status:    status,
		WhatChanged: spec.WhatChanged{
			Created: []spec.Ref{}, Updated: []spec.Ref{}, Linked: []spec.Link{},
		},
		Artifacts: spec.ReportArtifact{Documents: []spec.Ref{}, Tasks: []spec.Ref{}},
	}
	if stop != nil {
		r.StoppingReason = spec.StoppingReason{Type: stop.Type, Detail: stop.Detail}
	}
	// what_changed comes from what the tools reported doing, iteration by
	// iteration; an object created and later updated is listed as created.
	rows, err := tx.RecentIterations(ctx, run.ID, 1_000_000)
	if err != nil {
		return nil, err
	}
	created := map[string]bool{}
	updated := map[string]bool{}
	var all []spec.Artifacts
	for i := len(rows) - 1; i >= 0; i-- { // oldest first
		all = append(all, rows[i].ArtifactRefs)
	}
	if pending != nil {
		all = append(all, *pending)
	}
	for _, a := range all {
		for _, ref := range a.Created {
			if key := ref.Type + ":" + ref.ID + ref.Path; !created[key] {
				created[key] = true
				r.WhatChanged.Created = append(r.WhatChanged.Created, ref)
			}
		}
		for _, ref := range a.Updated {
			key := ref.Type + ":" + ref.ID + ref.Path
			if !created[key] && !updated[key] {
				updated[key] = true
				r.WhatChanged.Updated = append(r.WhatChanged.Updated, ref)
			}
		}
	}
	docs, err := tx.ListRunDocuments(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		r.Artifacts.Documents = append(r.Artifacts.Documents, spec.Ref{Type: "document", ID: d.ID, Title: d.Title, Path: d.Path})
		if d.ParentID != "" {
			r.WhatChanged.Linked = append(r.WhatChanged.Linked, spec.Link{FromID: d.ParentID, ToID: d.ID, Relationship: "contains"})
		}
	}
	tasks, err := tx.ListTasks(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	for _, t := range tasks {
		r.Artifacts.Tasks = append(r.Artifacts.Tasks, spec.Ref{Type: "task", ID: t.ID, Title: t.Title + " [" + t.Status + "]"})
	}
	start := run.StartedAt
	if start.IsZero() {
		start = run.CreatedAt
	}
	m := run.Metrics
	r.Metrics = spec.ReportMetrics{Iterations: m.Iterations, DurationMS: tx.Now().Sub(start).Milliseconds(), RunningMS: m.RunningMS,
		TotalTokens: m.TokensTotal, TotalCostUSD: m.CostTotalUSD, UnpricedCalls: m.UnpricedCalls, ToolCalls: m.ToolCallsTotal,
		FalseCompletionsBlocked: m.FalseCompletionsBlocked}
	r.Forecasts = forecastAccuracy(rows)
	return r, nil
}

func reportTitle(status, objective string) string {
	short := truncate(strings.TrimSpace(strings.SplitN(objective, "\n", 2)[0]), 80)
	switch status {
	case spec.StatusCompleted:
		return "Homework complete: " + short
	case spec.StatusCanceled:
		return "Homework canceled: " + short
	case spec.StatusFailed:
		return "Homework failed: " + short
	}
	return "Homework stopped: " + short
}

// narrate asks the executor's Narrator, if any, for the report narrative,
// under ctx, which carries the iteration's deadline (the summarizer's call
// is one of the iteration's model calls), and for at most NarrateTimeout.
// A failure leaves the report without one.
func (e *Engine) narrate(ctx context.Context, it *iteration, d spec.Decision, res *spec.Result, m spec.Metrics) (string, string) {
	n, ok := e.executorFor(it.cfg).(Narrator)
	if !ok {
		return "", ""
	}
	var report *spec.Report
	status := spec.StatusStopped
	if d.Decision == spec.DecisionComplete {
		status = spec.StatusCompleted
	} else if d.Decision == spec.DecisionFail {
		status = spec.StatusFailed
	}
	// The report's facts are read whatever is left of the deadline.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer rcancel()
	err := e.inTx(rctx, func(tx spec.Tx) error {
		run, err := tx.FindRun(rctx, it.run.ID)
		if err != nil {
			return err
		}
		report, err = e.buildReport(rctx, tx, run, status, &spec.StopReason{Type: cmp.Or(d.StopReason, spec.StopCompleted), Detail: joinReasons(d.Reasons)}, &res.Artifacts)
		if err != nil {
			return err
		}
		// The ending iteration is not stored yet; its usage already is
		// (recorded call by call).
		rm := &report.Metrics
		rm.Iterations += m.Iterations
		rm.ToolCalls += m.ToolCallsTotal
		rm.RunningMS += m.RunningMS
		rm.FalseCompletionsBlocked += m.FalseCompletionsBlocked
		return nil
	})
	if err != nil {
		return "", "could not build the report: " + err.Error()
	}
	nctx, cancel := context.WithTimeout(ctx, e.opts.NarrateTimeout)
	defer cancel()
	text, err := n.Narrate(nctx, it.run, it.cfg, report)
	if err != nil {
		e.log.Warn("narrative failed", "run", it.run.ID, "err", err)
		return "", fmt.Sprintf("The summary could not be written: %v", truncate(err.Error(), 300))
	}
	return text, ""
}
