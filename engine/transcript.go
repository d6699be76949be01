package engine

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"homework/engine/spec"
)

// Transcript bounds. An iteration keeps at most TranscriptCapBytes of
// transcript (text and structured data) over all its attempts; what the cap
// drops is counted and shown.
const (
	TranscriptCapBytes = 2 << 20

	transcriptFlushInterval = 250 * time.Millisecond
	transcriptFlushBytes    = 32 << 10
	transcriptWriteTimeout  = 10 * time.Second
)

// transcript collects one iteration attempt's transcript and stores it.
// Entries and streamed output are batched by a flusher goroutine (every
// transcriptFlushInterval, or at once when a stream's buffer is big) that
// starts with the first entry or byte and exits in close, which stores the
// rest. Batching keeps a quick iteration's transcript to one write
// transaction instead of one per model call and tool result.
type transcript struct {
	e         *Engine
	runID     string
	iteration int
	attempt   int
	capBytes  int64
	interval  time.Duration

	flushMu sync.Mutex // one store at a time, so lines keep their order

	mu      sync.Mutex
	pending []*spec.TranscriptLine
	streams map[string][]byte // streamed bytes not yet made a line
	order   []string          // streams in first-write order
	full    bool              // the iteration's cap is reached: drop without storing
	// droppedPending counts streamed bytes refused since the last store.
	droppedPending int64
	started        bool
	closed         bool
	kick           chan struct{}
	stop           chan struct{}
	wg             sync.WaitGroup
}

func (e *Engine) newTranscript(runID string, iteration, attempt int) *transcript {
	return &transcript{e: e, runID: runID, iteration: iteration, attempt: max(attempt, 1), capBytes: TranscriptCapBytes,
		interval: transcriptFlushInterval, streams: map[string][]byte{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

// add queues an entry after whatever was streamed before it.
func (t *transcript) add(en spec.TranscriptEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.takeStreamsLocked(true)
	t.pending = append(t.pending, &spec.TranscriptLine{Attempt: t.attempt, Kind: en.Kind, Name: en.Name, Role: en.Role,
		Text: strings.ToValidUTF8(en.Text, "\uFFFD"), Data: en.Data})
}

// takeStreamsLocked turns buffered stream bytes into pending lines. Unless
// final, an incomplete trailing rune stays buffered for the next write.
func (t *transcript) takeStreamsLocked(final bool) {
	for _, name := range t.order {
		b := t.streams[name]
		n := len(b)
		if !final {
			n = completeRunes(b)
		}
		if n == 0 {
			continue
		}
		t.pending = append(t.pending, &spec.TranscriptLine{Attempt: t.attempt, Kind: spec.TranscriptOutput, Name: name,
			Text: strings.ToValidUTF8(string(b[:n]), "\uFFFD")})
		t.streams[name] = append([]byte(nil), b[n:]...)
	}
}

// completeRunes returns how many leading bytes of b end on a whole rune.
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// flush stores the pending lines and appends EventTranscript while this
// attempt is the run's running one. When the run ended with this attempt
// the lines are stored without an event (its end is its last event); when
// another attempt took the run over, nothing is written. The store outlives the
// iteration's cancellation: what an interrupted agent did is worth keeping.
//
// outcome, when not nil, makes the executor's writes that waited for an
// outcome the attempt did not reach (host.writeOutcome), first in the same
// transaction, while the run is still running this attempt.
func (t *transcript) flush(ctx context.Context, final bool, outcome func(context.Context, spec.Tx) (func(), error)) {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.mu.Lock()
	t.takeStreamsLocked(final)
	lines, dropped := t.pending, t.droppedPending
	t.pending, t.droppedPending = nil, 0
	t.mu.Unlock()
	if len(lines) == 0 && dropped == 0 && outcome == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transcriptWriteTimeout)
	defer cancel()
	var written func()
	err := t.e.inTx(ctx, func(tx spec.Tx) error {
		written = nil
		// The run's row first, as the finishing transaction locks it.
		run, err := tx.FindRun(ctx, t.runID)
		if err != nil {
			return err
		}
		if run.Iteration != t.iteration || max(run.Attempt, 1) != t.attempt {
			return nil // another attempt is the run's now: this one writes nothing
		}
		// The executor's queued writes only while the run is still this
		// process's attempt's (not taken over).
		if outcome != nil && run.Status == spec.StatusRunning && run.LeaseOwner == t.e.id {
			if written, err = outcome(ctx, tx); err != nil {
				return err
			}
		}
		if len(lines) == 0 && dropped == 0 {
			return nil
		}
		kept, info, err := tx.AppendTranscript(ctx, t.runID, t.iteration, t.capBytes, lines, dropped)
		if err != nil {
			return err
		}
		if info.Bytes >= info.CapBytes {
			t.mu.Lock()
			t.full = true
			t.mu.Unlock()
		}
		if len(kept) == 0 || run.Status != spec.StatusRunning {
			// A run that ended with this attempt (a cancel) keeps what
			// its agent did, and its end stays its last event.
			return nil
		}
		_, err = tx.AppendEvent(ctx, t.runID, spec.EventTranscript, spec.TranscriptData{
			Iteration: t.iteration, Attempt: t.attempt, FromSeq: kept[0].Seq, ToSeq: kept[len(kept)-1].Seq,
			Lines: info.Lines, Bytes: info.Bytes, DroppedBytes: info.DroppedBytes,
		})
		return err
	})
	if err != nil {
		t.e.log.Warn("store transcript", "run", t.runID, "iteration", t.iteration, "err", err)
	} else if written != nil {
		written()
	}
}

// Transcribe queues en after any output streamed before it, for the
// flusher or, after close, the iteration's finishing transaction.
func (t *transcript) Transcribe(ctx context.Context, en spec.TranscriptEntry) {
	t.add(en)
	t.mu.Lock()
	if !t.closed {
		t.startLocked()
	}
	t.mu.Unlock()
}

// write buffers streamed bytes; the flusher stores them.
func (t *transcript) write(stream string, p []byte) {
	t.mu.Lock()
	if t.full {
		// Count what the cap drops without queueing it.
		t.droppedPending += int64(len(p))
		t.mu.Unlock()
		return
	}
	if _, ok := t.streams[stream]; !ok {
		t.order = append(t.order, stream)
	}
	t.streams[stream] = append(t.streams[stream], p...)
	big := len(t.streams[stream]) >= transcriptFlushBytes
	if !t.closed {
		t.startLocked()
	}
	t.mu.Unlock()
	if big {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// startLocked starts the flusher once; t.mu is held and t is not closed.
func (t *transcript) startLocked() {
	if t.started {
		return
	}
	t.started = true
	t.wg.Add(1)
	go func() {
		// Exits when close closes t.stop.
		defer t.wg.Done()
		t.run()
	}()
}

func (t *transcript) run() {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.kick:
		case <-tick.C:
		}
		t.flush(context.Background(), false, nil)
	}
}

// close stops the flusher and turns what was streamed into pending lines.
// What is pending then (and what is added after: the checks' outcomes, the
// summarizer's calls) is stored by the transaction that finishes the
// iteration (takePending), or by flush when there is none.
func (t *transcript) close() {
	t.mu.Lock()
	wasClosed := t.closed
	t.closed = true
	t.mu.Unlock()
	if !wasClosed {
		close(t.stop)
	}
	t.wg.Wait()
	t.mu.Lock()
	t.takeStreamsLocked(true)
	t.mu.Unlock()
}

// pending returns the lines and dropped bytes waiting to be stored, without
// taking them: the caller's transaction may still roll back.
func (t *transcript) pendingLines() ([]*spec.TranscriptLine, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*spec.TranscriptLine(nil), t.pending...), t.droppedPending
}

// stored drops the first n pending lines and dropped bytes, which the
// caller's transaction stored and committed; full is whether the cap is
// reached.
func (t *transcript) stored(n int, dropped int64, full bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = t.pending[n:]
	t.droppedPending -= dropped
	t.full = t.full || full
}

// streamWriter is the io.Writer of one stream of a transcript.
type streamWriter struct {
	t    *transcript
	name string
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.t.write(w.name, p)
	return len(p), nil
}

// Transcribe implements spec.Transcriber.
func (h *host) Transcribe(ctx context.Context, en spec.TranscriptEntry) {
	if h.tr != nil {
		h.tr.Transcribe(ctx, en)
	}
}

// TranscriptWriter implements spec.Transcriber.
func (h *host) TranscriptWriter(stream string) io.Writer {
	if h.tr == nil {
		return io.Discard
	}
	return streamWriter{t: h.tr, name: stream}
}

// closeTranscript ends the iteration's streamed output.
func (h *host) closeTranscript() {
	if h != nil && h.tr != nil {
		h.tr.close()
	}
}

// flushTranscript stores whatever the finishing transaction did not: all of
// the transcript, and the executor's writes queued for the outcome, when
// the attempt ended without an outcome (what an interrupted agent did is
// worth keeping), nothing usually.
func (h *host) flushTranscript(ctx context.Context) {
	if h == nil || h.tr == nil {
		return
	}
	h.tr.close()
	var outcome func(context.Context, spec.Tx) (func(), error)
	if h.pendingOutcome() {
		outcome = h.writeOutcome
	}
	h.tr.flush(ctx, true, outcome)
}

// storeTranscript stores the iteration's pending transcript lines in tx,
// the transaction that finishes the iteration, with their EventTranscript
// before the iteration's own events. It returns what to mark stored once tx
// commits.
func (h *host) storeTranscript(ctx context.Context, tx spec.Tx) (commit func(), err error) {
	if h == nil || h.tr == nil {
		return func() {}, nil
	}
	t := h.tr
	lines, dropped := t.pendingLines()
	if len(lines) == 0 && dropped == 0 {
		return func() {}, nil
	}
	kept, info, err := tx.AppendTranscript(ctx, t.runID, t.iteration, t.capBytes, lines, dropped)
	if err != nil {
		return nil, err
	}
	if len(kept) > 0 {
		if _, err := tx.AppendEvent(ctx, t.runID, spec.EventTranscript, spec.TranscriptData{
			Iteration: t.iteration, Attempt: t.attempt, FromSeq: kept[0].Seq, ToSeq: kept[len(kept)-1].Seq,
			Lines: info.Lines, Bytes: info.Bytes, DroppedBytes: info.DroppedBytes,
		}); err != nil {
			return nil, err
		}
	}
	return func() { t.stored(len(lines), dropped, info.Bytes >= info.CapBytes) }, nil
}

// transcribeModelCall adds a model call to the transcript: its usage, and
// its error when it failed (a retried call shows as a failed one first).
func (h *host) transcribeModelCall(ctx context.Context, c spec.LLMCall) {
	if h.tr == nil {
		return
	}
	text := fmt.Sprintf("%s call to %s: %d prompt + %d completion tokens, %d ms", c.Role, c.Model, c.PromptTokens, c.CompletionTokens, c.LatencyMS)
	if c.Error != "" {
		text = fmt.Sprintf("%s call to %s failed after %d ms: %s", c.Role, c.Model, c.LatencyMS, c.Error)
	}
	h.tr.Transcribe(ctx, spec.TranscriptEntry{Kind: spec.TranscriptModelCall, Name: c.Model, Role: c.Role, Text: text,
		Data: spec.TranscriptJSON(llmCallEvent(h.iteration, c))})
}

// transcribeChecks adds each objective check's outcome and output.
func (h *host) transcribeChecks(results []spec.CheckResult) {
	if h == nil || h.tr == nil {
		return
	}
	for _, r := range results {
		verdict := "passed"
		switch {
		case r.Errored:
			verdict = "errored"
		case !r.Passed:
			verdict = "failed"
		}
		text := fmt.Sprintf("%s %s (%d ms): %s", r.Name, verdict, r.DurationMS, r.Message)
		if r.OutputTail != "" {
			text += "\n" + r.OutputTail
		}
		h.tr.add(spec.TranscriptEntry{Kind: spec.TranscriptCheck, Name: r.Name, Text: text,
			Data: spec.TranscriptJSON(map[string]any{"type": r.Type, "passed": r.Passed, "errored": r.Errored})})
	}
}

// hostOf returns the engine host of an iteration, or nil.
func hostOf(it *iteration) *host {
	if it == nil || it.input == nil {
		return nil
	}
	h, _ := it.input.Host.(*host)
	return h
}
