// Package scripted is an executor that follows a script given in the run's
// config. It exists to test the engine end to end (including from a real
// server process) without a model; a server enables it only with
// --script-executor.
package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"homework/engine/spec"
)

// Script is the run config's "script".
type Script struct {
	// Steps are played one per iteration; past the end the last repeats.
	Steps []Step `json:"steps"`
}

// Step is what one iteration does.
type Step struct {
	Summary string `json:"summary,omitempty"`
	Output  string `json:"output,omitempty"`
	SleepMS int64  `json:"sleep_ms,omitempty"`
	// SleepFirstMS sleeps only in the first attempt of the iteration (a
	// recovered attempt runs at once).
	SleepFirstMS int64          `json:"sleep_first_attempt_ms,omitempty"`
	Status       *spec.Status   `json:"status,omitempty"`
	Promise      *spec.Promise  `json:"promise,omitempty"`
	Error        string         `json:"error,omitempty"`
	ErrorFP      string         `json:"error_fingerprint,omitempty"`
	Fail         string         `json:"fail,omitempty"` // return a Go error
	Panic        string         `json:"panic,omitempty"`
	Fatal        *spec.Fatal    `json:"fatal,omitempty"`
	Progress     string         `json:"progress,omitempty"` // default: the iteration number (always progressing)
	Output2      string         `json:"output_hash,omitempty"`
	Diff         string         `json:"diff_hash,omitempty"`
	Stuck        string         `json:"stuck,omitempty"`
	Tools        int            `json:"tool_calls,omitempty"`
	LLM          []spec.LLMCall `json:"llm,omitempty"`
	Docs         []Doc          `json:"documents,omitempty"`
	// OutcomeDocs are written with the iteration's outcome
	// (spec.WithOutcome), queued before the step sleeps.
	OutcomeDocs []Doc  `json:"outcome_documents,omitempty"`
	Tasks       []Task `json:"tasks,omitempty"`
	Emit        int    `json:"emit,omitempty"` // extra tool_call events to emit
	Approve     string `json:"wait_for_approval,omitempty"`
	// Transcript lines are added to the iteration's transcript in order;
	// Stream is written StreamRepeat times (once when zero) as streamed
	// output, after them.
	Transcript   []Line `json:"transcript,omitempty"`
	Stream       string `json:"stream,omitempty"`
	StreamRepeat int    `json:"stream_repeat,omitempty"`
	// StreamEveryMS sleeps between the repeats of Stream.
	StreamEveryMS int64 `json:"stream_every_ms,omitempty"`
}

// Line is a transcript line a step adds.
type Line struct {
	Kind string `json:"kind"`
	Name string `json:"name,omitempty"`
	Text string `json:"text"`
}

// Doc is a document a step writes into the run's workspace.
type Doc struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Task is a checklist task a step adds or (by title) updates.
type Task struct {
	Title  string `json:"title"`
	Status string `json:"status"`
}

// Executor plays scripts. It writes a step's documents and tasks through
// InTx, one write transaction of the store (spec.Store's WriteTx); InTx is
// required when a script writes.
type Executor struct {
	InTx func(ctx context.Context, fn func(tx spec.Tx) error) error
}

// ValidateConfig checks that the script parses and has steps.
func (x *Executor) ValidateConfig(ctx context.Context, user *spec.User, cfg *spec.Config) error {
	var s Script
	if len(cfg.Script) == 0 {
		return spec.FieldError("script", "The script executor needs a script.")
	}
	if err := json.Unmarshal(cfg.Script, &s); err != nil {
		return spec.FieldError("script", "Invalid script: %v", err)
	}
	if len(s.Steps) == 0 {
		return spec.FieldError("script", "The script has no steps.")
	}
	return nil
}

// Iterate plays the step for in.Iteration.
func (x *Executor) Iterate(ctx context.Context, in *spec.Input) (*spec.Result, error) {
	var s Script
	if err := json.Unmarshal(in.Config.Script, &s); err != nil {
		return nil, err
	}
	st := s.Steps[min(in.Iteration, len(s.Steps))-1]
	if len(st.OutcomeDocs) > 0 {
		if x.InTx == nil {
			return nil, errors.New("scripted: Executor.InTx is required to write documents and tasks")
		}
		err := spec.WithOutcome(ctx, in.Host, x.InTx, func(ctx context.Context, tx spec.Tx) error {
			return putDocs(ctx, tx, in, st.OutcomeDocs, nil)
		})
		if err != nil {
			return nil, err
		}
	}
	sleep := st.SleepMS
	if in.Attempt == 1 {
		sleep += st.SleepFirstMS
	}
	if sleep > 0 {
		t := time.NewTimer(time.Duration(sleep) * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return &spec.Result{Summary: "interrupted"}, ctx.Err()
		case <-t.C:
		}
	}
	if st.Panic != "" {
		panic(st.Panic)
	}
	for _, c := range st.LLM {
		if err := in.Host.RecordLLMCall(ctx, c); err != nil {
			return nil, err
		}
	}
	for _, l := range st.Transcript {
		spec.Transcribe(ctx, in.Host, spec.TranscriptEntry{Kind: l.Kind, Name: l.Name, Text: l.Text})
	}
	if st.Stream != "" {
		w := spec.TranscriptWriter(in.Host, "output")
		for i := 0; i < max(st.StreamRepeat, 1); i++ {
			if i > 0 && st.StreamEveryMS > 0 {
				t := time.NewTimer(time.Duration(st.StreamEveryMS) * time.Millisecond)
				select {
				case <-ctx.Done():
					t.Stop()
					return &spec.Result{Summary: "interrupted"}, ctx.Err()
				case <-t.C:
				}
			}
			w.Write([]byte(st.Stream))
		}
	}
	for i := 0; i < st.Emit; i++ {
		if err := in.Host.Emit(ctx, spec.EventToolCall, spec.ToolCallData{Iteration: in.Iteration, N: i + 1, Tool: "scripted"}); err != nil {
			return nil, err
		}
	}
	res := &spec.Result{
		Summary: st.Summary, Output: st.Output, Status: st.Status, Promise: st.Promise, Error: st.Error,
		ErrorFingerprint: st.ErrorFP, Fatal: st.Fatal, Progress: st.Progress, OutputHash: st.Output2,
		DiffHash: st.Diff, Stuck: st.Stuck, ToolCalls: st.Tools, WaitForApproval: st.Approve,
	}
	if res.Summary == "" {
		res.Summary = fmt.Sprintf("iteration %d", in.Iteration)
	}
	if len(in.Inbox) > 0 {
		var bodies []string
		for _, m := range in.Inbox {
			bodies = append(bodies, m.Kind+": "+m.Body)
		}
		res.Summary += " | inbox: " + strings.Join(bodies, " / ")
	}
	if in.Feedback != nil && len(in.Feedback.FailingChecks) > 0 {
		res.Summary += fmt.Sprintf(" | saw %d failing checks", len(in.Feedback.FailingChecks))
	}
	if res.Progress == "" {
		res.Progress = fmt.Sprint(in.Iteration)
	}
	if err := x.write(ctx, in, st, res); err != nil {
		return nil, err
	}
	if st.Fail != "" {
		return res, fmt.Errorf("%s", st.Fail)
	}
	return res, nil
}

func (x *Executor) write(ctx context.Context, in *spec.Input, st Step, res *spec.Result) error {
	if len(st.Docs) == 0 && len(st.Tasks) == 0 {
		return nil
	}
	if x.InTx == nil {
		return errors.New("scripted: Executor.InTx is required to write documents and tasks")
	}
	return x.InTx(ctx, func(tx spec.Tx) error {
		if err := putDocs(ctx, tx, in, st.Docs, res); err != nil {
			return err
		}
		existing, err := tx.ListTasks(ctx, in.RunID)
		if err != nil {
			return err
		}
		for _, t := range st.Tasks {
			var task *spec.Task
			for _, e := range existing {
				if e.Title == t.Title {
					task = e
				}
			}
			if task == nil {
				task = &spec.Task{RunID: in.RunID, Title: t.Title, Status: t.Status}
				if err := tx.InsertTask(ctx, task); err != nil {
					return err
				}
				res.Artifacts.Created = append(res.Artifacts.Created, spec.Ref{Type: "task", ID: task.ID, Title: task.Title})
			} else {
				task.Status = t.Status
				if err := tx.UpdateTask(ctx, task); err != nil {
					return err
				}
				res.Artifacts.Updated = append(res.Artifacts.Updated, spec.Ref{Type: "task", ID: task.ID, Title: task.Title})
			}
			if _, err := tx.AppendEvent(ctx, in.RunID, spec.EventTaskUpdated, spec.TaskData{TaskID: task.ID, Title: task.Title, Status: task.Status}); err != nil {
				return err
			}
		}
		return nil
	})
}

// putDocs writes docs into the run's workspace in tx with their events,
// recording them in res's artifacts when res is not nil.
func putDocs(ctx context.Context, tx spec.Tx, in *spec.Input, docs []Doc, res *spec.Result) error {
	for _, d := range docs {
		doc := &spec.Document{RunID: in.RunID, Path: d.Path, Title: d.Path, Content: d.Content, Iteration: in.Iteration}
		created, err := tx.PutDocument(ctx, doc)
		if err != nil {
			return err
		}
		typ := spec.EventDocumentUpdated
		ref := spec.Ref{Type: "document", ID: doc.ID, Title: doc.Title, Path: doc.Path}
		if created {
			typ = spec.EventDocumentCreated
		}
		if res != nil && created {
			res.Artifacts.Created = append(res.Artifacts.Created, ref)
		} else if res != nil {
			res.Artifacts.Updated = append(res.Artifacts.Updated, ref)
		}
		if _, err := tx.AppendEvent(ctx, in.RunID, typ, spec.DocumentData{DocumentID: doc.ID, Path: doc.Path, Title: doc.Title}); err != nil {
			return err
		}
	}
	return nil
}
