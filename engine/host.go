package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"homework/engine/spec"
)

// host is the spec.Host an executor gets for one iteration.
type host struct {
	e         *Engine
	runID     string
	iteration int
	// budgets, when set, are checked after every model call and tool call
	// of the iteration; baseTools is the run's tool calls before it.
	budgets   *spec.Budgets
	baseTools int
	tools     atomic.Int64
	tr        *transcript // nil outside an iteration (the summarizer)
	// unavailable is the last error of a store call made for the iteration
	// that found the store unavailable, nil when none did.
	unavailable atomic.Pointer[error]

	// usageMu serialises the iteration's model call records, so that
	// usage, the iteration's model usage as committed, is exact while
	// usageKnown: from the start for an attempt that begins its iteration
	// (no call is recorded against an iteration before it begins), from its
	// first record, which reads the store, otherwise; and until a record
	// fails (its commit may have happened).
	usageMu    sync.Mutex
	usage      spec.Metrics
	usageKnown bool

	outcomeMu sync.Mutex
	// outcome holds the executor's writes queued for the transaction that
	// finishes the iteration (WithOutcome), until one commits them.
	outcome []func(ctx context.Context, tx spec.Tx) error
}

// WithOutcome implements spec.OutcomeWriter.
func (h *host) WithOutcome(write func(ctx context.Context, tx spec.Tx) error) {
	h.outcomeMu.Lock()
	h.outcome = append(h.outcome, write)
	h.outcomeMu.Unlock()
}

// writeOutcome makes the writes queued for the iteration's outcome in tx.
// It returns what to call once tx commits, which takes them off the queue.
func (h *host) writeOutcome(ctx context.Context, tx spec.Tx) (commit func(), err error) {
	if h == nil {
		return func() {}, nil
	}
	h.outcomeMu.Lock()
	writes := append([]func(context.Context, spec.Tx) error(nil), h.outcome...)
	h.outcomeMu.Unlock()
	for _, w := range writes {
		if err := w(ctx, tx); err != nil {
			return nil, err
		}
	}
	return func() {
		h.outcomeMu.Lock()
		h.outcome = h.outcome[len(writes):]
		h.outcomeMu.Unlock()
	}, nil
}

// pendingOutcome reports whether writes wait for the iteration's outcome.
func (h *host) pendingOutcome() bool {
	if h == nil {
		return false
	}
	h.outcomeMu.Lock()
	defer h.outcomeMu.Unlock()
	return len(h.outcome) > 0
}

// noteStore keeps err, from a store call made under ctx, when it says the
// store was unavailable; an error of ctx's own end is not one.
func (h *host) noteStore(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && h.e.storeUnavailable(err) {
		h.unavailable.Store(&err)
	}
}

// storeError returns the last store error of the iteration that found the
// store unavailable, or nil.
func (h *host) storeError() error {
	if p := h.unavailable.Load(); p != nil {
		return *p
	}
	return nil
}

func (h *host) Now() time.Time { return h.e.now() }

// Emit appends a non-state event through the group committer. A tool_call
// counts against the run's tool-call budget.
func (h *host) Emit(ctx context.Context, typ spec.EventType, data any) error {
	_, err := h.e.store.AppendEvent(ctx, h.runID, typ, data)
	h.noteStore(ctx, err)
	h.emitted(typ)
	return err
}

// emitted counts an appended event of typ: a tool_call against the run's
// tool-call budget.
func (h *host) emitted(typ spec.EventType) {
	if typ == spec.EventToolCall && h.budgets != nil && h.budgets.MaxToolCalls > 0 {
		n := h.baseTools + int(h.tools.Add(1))
		h.checkBudgets(spec.Metrics{ToolCallsTotal: n})
	}
}

// checkBudgets ends the iteration at once when m (the run's live totals)
// has used up its cost, token or tool-call budget.
func (h *host) checkBudgets(m spec.Metrics) {
	if h.budgets == nil {
		return
	}
	b := spec.Budgets{MaxTotalTokens: h.budgets.MaxTotalTokens, MaxCostUSD: h.budgets.MaxCostUSD, MaxToolCalls: h.budgets.MaxToolCalls}
	if r := budgetExceeded(b, m); r != nil {
		h.e.cutIteration(h.runID, h.iteration, r)
	}
}

// RecordLLMCall stores the call, adds it to the run's live totals and emits
// llm_call and iteration_cost_update, all in one transaction, committed
// before it returns (so spend survives a crash), which it may share with
// other runs' records and event appends (groupTx).
func (h *host) RecordLLMCall(ctx context.Context, c spec.LLMCall) error {
	return h.recordLLMCall(ctx, c, "", nil)
}

// RecordLLMCallWith implements spec.CallEventWriter. The event is appended
// whatever the run's status, as Emit's would be.
func (h *host) RecordLLMCallWith(ctx context.Context, c spec.LLMCall, typ spec.EventType, data any) error {
	err := h.recordLLMCall(ctx, c, typ, data)
	if err == nil {
		h.emitted(typ)
	}
	return err
}

// recordLLMCall records c and, when typ is set, appends an event of typ
// and data after c's own in the same transaction.
func (h *host) recordLLMCall(ctx context.Context, c spec.LLMCall, typ spec.EventType, data any) error {
	e := h.e
	ctx = context.WithoutCancel(ctx) // spend is recorded even when the iteration is cancelled
	var live, iter spec.Metrics
	h.usageMu.Lock()
	err := e.groupTx(ctx, func(tx spec.Tx) error {
		var err error
		if live, iter, err = h.addLLMCall(ctx, tx, c); err != nil || typ == "" {
			return err
		}
		_, err = tx.AppendEvent(ctx, h.runID, typ, data)
		return err
	})
	h.usage, h.usageKnown = iter, err == nil
	h.usageMu.Unlock()
	h.transcribeModelCall(ctx, c)
	h.noteStore(ctx, err)
	if err == nil {
		h.e.metrics.llmTokens.Add(float64(c.PromptTokens + c.CompletionTokens))
		h.e.metrics.llmCost.Add(c.CostUSD)
		live.ToolCallsTotal = 0 // counted by Emit
		h.checkBudgets(live)
	}
	return err
}

// addLLMCall stores c, adds it to the run's live totals and appends
// llm_call and iteration_cost_update in tx. It returns the run's totals
// with c, zero when the run has ended, and the iteration's usage with c.
// The caller holds usageMu.
func (h *host) addLLMCall(ctx context.Context, tx spec.Tx, c spec.LLMCall) (live, iter spec.Metrics, err error) {
	row := c
	row.RunID, row.Iteration = h.runID, h.iteration
	if err := tx.InsertLLMCall(ctx, &row); err != nil {
		return live, iter, err
	}
	if h.usageKnown {
		iter.Add(h.usage)
		iter.AddLLMCall(row)
	} else if iter, err = tx.SumLLMCalls(ctx, h.runID, h.iteration); err != nil {
		return live, iter, err
	}
	run, err := tx.FindRun(ctx, h.runID)
	if err != nil {
		return live, iter, err
	}
	if spec.IsTerminalStatus(run.Status) {
		// The spend is kept (llm_calls), but a finished run's metrics
		// and events end with its terminal event.
		return live, iter, nil
	}
	run.Metrics.AddLLMCall(c)
	if err := tx.SetRunMetrics(ctx, run); err != nil {
		return live, iter, err
	}
	if _, err := tx.AppendEvent(ctx, h.runID, spec.EventLLMCall, llmCallEvent(h.iteration, c)); err != nil {
		return live, iter, err
	}
	_, err = tx.AppendEvent(ctx, h.runID, spec.EventIterationCostUpdate, spec.CostUpdateData{
		Iteration: h.iteration, IterationTokens: iter.TokensTotal, IterationCostUSD: iter.CostTotalUSD,
		TokensTotal: run.Metrics.TokensTotal, CostTotalUSD: run.Metrics.CostTotalUSD,
		UnpricedCalls: run.Metrics.UnpricedCalls, ByModel: run.Metrics.ByModel,
	})
	return run.Metrics, iter, err
}

// iterationUsage returns the iteration's model usage as committed, and
// whether the host knows it (see usageKnown).
func (h *host) iterationUsage() (spec.Metrics, bool) {
	h.usageMu.Lock()
	defer h.usageMu.Unlock()
	var m spec.Metrics
	m.Add(h.usage) // a copy: ByModel is the host's
	return m, h.usageKnown
}

// llmCallEvent is the data of an llm_call event: the call's tokens, split
// into cached, cache-write and reasoning parts when it has them, and its
// cost with the cost's source (and the table's own figure when a
// CLI-reported cost differs from it by more than 5%).
func llmCallEvent(iteration int, c spec.LLMCall) spec.LLMCallData {
	return spec.LLMCallData{Iteration: iteration, Role: c.Role, Model: c.Model, PromptTokens: c.PromptTokens,
		CompletionTokens: c.CompletionTokens, CachedTokens: c.CachedTokens, CacheWriteTokens: c.CacheWriteTokens,
		ReasoningTokens: c.ReasoningTokens, CostUSD: c.CostUSD, Priced: c.Priced, CostSource: c.CostSource,
		TableCostUSD: c.TableCostUSD, LatencyMS: c.LatencyMS, Error: c.Error}
}

// budgetCut is the cancel cause of an iteration ended at once because the
// run used up a budget during it.
type budgetCut struct{ reason *budgetReason }

func (c *budgetCut) Error() string { return "budget used up during the iteration: " + c.reason.detail }

// cutIteration ends the run's iteration in flight, if it is iteration, with
// a budgetCut.
func (e *Engine) cutIteration(runID string, iteration int, r *budgetReason) {
	e.mu.Lock()
	f := e.inflight[runID]
	e.mu.Unlock()
	if f != nil && f.iteration == iteration {
		f.cut(&budgetCut{reason: r})
	}
}

// RecordLLMCall records a model call made for the run outside an iteration's
// host (the summarizer writing the report), against the run's current
// iteration, updating its live totals.
func (e *Engine) RecordLLMCall(ctx context.Context, run *spec.Run, c spec.LLMCall) error {
	h := &host{e: e, runID: run.ID, iteration: max(run.Iteration, 1)}
	return h.RecordLLMCall(ctx, c)
}
