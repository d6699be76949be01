package llm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/sashabaranov/go-openai"

	"homework/engine/spec"
)

const maxBranchResult = 3000 // a branch's result as the planner sees it

// branchTask is one delegated sub-task.
type branchTask struct {
	ID           string `json:"id"`
	Title        string `json:"title"`
	Instructions string `json:"instructions"`
}

var branchIDRE = regexp.MustCompile(`[^a-z0-9-]+`)

// delegate runs tasks as parallel branches, at most MaxParallelBranches at
// once, and returns their results for the planner. It returns when every
// branch it started has returned.
func (it *iteration) delegate(ctx context.Context, tasks []branchTask) string {
	ids := make([]string, len(tasks))
	seen := map[string]bool{}
	for i, t := range tasks {
		id := strings.Trim(branchIDRE.ReplaceAllString(strings.ToLower(t.ID), "-"), "-")
		if id == "" || seen[id] {
			id = fmt.Sprintf("i%03d-%d", it.in.Iteration, i+1)
		}
		seen[id] = true
		ids[i] = truncate(id, 40)
	}
	results := make([]string, len(tasks))
	sem := make(chan struct{}, it.e.opts.MaxParallelBranches)
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = fmt.Sprintf("### Branch %s — %s\nstatus: not started (the iteration ended)", ids[i], tasks[i].Title)
				return
			}
			defer func() { <-sem }()
			results[i] = it.runBranch(ctx, ids[i], tasks[i])
		}()
	}
	wg.Wait()
	return strings.Join(results, "\n\n")
}

// runBranch runs one delegated sub-task with its own tool loop and returns
// its report for the planner.
func (it *iteration) runBranch(ctx context.Context, id string, bt branchTask) (report string) {
	folder := branchesFolder + "/" + id
	sc := &scope{it: it, role: RoleExecutor, model: it.executorModel, prefix: folder + "/", branch: id,
		tools: it.mcp.withMCP(it.e.branchTools()), limit: it.e.opts.BranchToolCalls, u: &usage{}}
	defer func() {
		if r := recover(); r != nil {
			it.e.log.Error("branch panicked", "run", it.in.RunID, "branch", id, "panic", r, "stack", string(debug.Stack()))
			it.fail(toolDelegate, "internal", fmt.Sprintf("branch %s panicked", id))
			report = fmt.Sprintf("### Branch %s — %s\nstatus: failed (internal error)", id, bt.Title)
		}
	}()
	if _, err := it.putDoc(ctx, &spec.Document{Path: folder, Kind: spec.DocBranch, Title: bt.Title,
		Description: truncate(bt.Instructions, 500), Content: "# " + bt.Title + "\n\n" + bt.Instructions + "\n"}); err != nil {
		it.e.log.Warn("create branch folder", "run", it.in.RunID, "branch", id, "err", err)
		return fmt.Sprintf("### Branch %s — %s\nstatus: failed (could not create its folder: %s)", id, bt.Title, errMessage(err))
	}
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: fmt.Sprintf(branchPrompt, id, folder)},
		{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf("The run's objective (for context):\n%s\n\nYour sub-task: %s\n\n%s",
			truncate(it.cfg.Objective, 3000), bt.Title, bt.Instructions)},
	}
	it.loop(ctx, sc, msgs)

	status := "finished"
	switch {
	case sc.modelErr != nil:
		status = "failed: " + sc.modelErr.Message
		if ctx.Err() == nil {
			it.mu.Lock()
			it.res.Error, it.res.ErrorFingerprint = "branch "+id+": "+sc.modelErr.Message, "branch:"+sc.modelErr.Fingerprint
			it.mu.Unlock()
		}
	case sc.stuck != "":
		status = "stopped, stuck: " + sc.stuck
	case sc.bound:
		status = fmt.Sprintf("stopped at its bound of %d tool calls", sc.limit)
	case !sc.done:
		status = "ended without calling finish"
	}
	result := strings.TrimSpace(sc.result)
	if result == "" {
		result = strings.TrimSpace(sc.lastText)
	}
	if result != "" && ctx.Err() == nil {
		if _, err := it.putDoc(ctx, &spec.Document{Path: folder + "/result.md", Kind: spec.DocNote, Title: "Result: " + bt.Title,
			Content: "# Result: " + bt.Title + "\n\n" + result + "\n"}); err != nil {
			it.e.log.Warn("write branch result", "run", it.in.RunID, "branch", id, "err", err)
		}
	}
	if result == "" {
		result = "(no result)"
	}
	u := sc.u
	cost := fmt.Sprintf("$%.4f", u.costUSD)
	if u.unpriced > 0 {
		cost += fmt.Sprintf(" (%d unpriced calls)", u.unpriced)
	}
	return fmt.Sprintf("### Branch %s — %s\nstatus: %s\ntool calls: %d; model calls: %d; tokens: %d in, %d out; cost: %s\ndocuments: under %s/\nresult:\n%s",
		id, bt.Title, status, sc.calls, u.calls, u.promptTokens, u.completionTokens, cost, folder, truncate(result, maxBranchResult))
}

func errMessage(err error) string {
	var te *toolError
	if errors.As(err, &te) {
		return te.msg
	}
	return "internal error"
}

const branchPrompt = `You are an executor agent working on one sub-task (branch %s) of a larger objective, in parallel with others.
Use the tools to research and write. Your documents go under %s/ (paths you give are relative to it).
Keep to your sub-task. When done, call finish with a concise result: what you found and which documents you wrote.`
