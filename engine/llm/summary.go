package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"homework/engine/spec"
)

// record writes the iteration's summary document and fingerprints its
// progress into the Result. The record survives the iteration's own
// deadline.
func (it *iteration) record(ctx context.Context, limit int) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := it.writeSummary(fctx, limit); err != nil {
		it.e.log.Warn("write iteration summary", "run", it.in.RunID, "iteration", it.in.Iteration, "err", err)
	}
	st := it.start
	if it.changed.Load() {
		var err error
		if st, err = it.e.readState(fctx, it.in); err != nil {
			it.e.log.Warn("progress fingerprint", "run", it.in.RunID, "err", err)
			return
		}
	}
	it.res.Progress = progress(st)
}

// writeSummary writes iterations/NNN-summary.md.
func (it *iteration) writeSummary(ctx context.Context, limit int) error {
	it.mu.Lock()
	res := *it.res
	created := append([]spec.Ref(nil), res.Artifacts.Created...)
	updated := append([]spec.Ref(nil), res.Artifacts.Updated...)
	it.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# Iteration %d\n\n%s\n\n", it.in.Iteration, res.Summary)
	if st := res.Status; st != nil {
		fmt.Fprintf(&b, "- exit signal: %v; needs input: %v; confidence: %s\n", st.ExitSignal, st.NeedsUserInput, orDash(st.Confidence))
		for _, q := range st.BlockingQuestions {
			fmt.Fprintf(&b, "- question: %s\n", q)
		}
		for _, w := range st.RemainingWork {
			fmt.Fprintf(&b, "- remaining: %s\n", w)
		}
		for _, ev := range st.CompletionEvidence {
			fmt.Fprintf(&b, "- evidence: %s\n", ev)
		}
		if st.NextActionHint != "" {
			fmt.Fprintf(&b, "- next: %s\n", st.NextActionHint)
		}
	}
	fmt.Fprintf(&b, "- tool calls: %d (bound %d)\n", res.ToolCalls, limit)
	for _, r := range created {
		fmt.Fprintf(&b, "- created %s: %s\n", r.Type, refName(r))
	}
	for _, r := range updated {
		fmt.Fprintf(&b, "- updated %s: %s\n", r.Type, refName(r))
	}
	if res.Stuck != "" {
		fmt.Fprintf(&b, "- stuck: %s\n", res.Stuck)
	}
	if res.Error != "" {
		fmt.Fprintf(&b, "- error: %s\n", res.Error)
	}
	if res.WaitForApproval != "" {
		fmt.Fprintf(&b, "- waiting for approval: %s\n", res.WaitForApproval)
	}
	p := fmt.Sprintf("%s/%03d-summary.md", iterationsFolder, it.in.Iteration)
	doc := &spec.Document{Path: p, Kind: spec.DocSummary, Title: fmt.Sprintf("Iteration %d summary", it.in.Iteration),
		Description: truncate(oneLine(res.Summary), 300), Content: truncate(b.String(), 20000)}
	// Nothing in the iteration reads its summary again: it commits with the
	// iteration's outcome when the host can, not in a transaction of its own.
	return spec.WithOutcome(ctx, it.host, it.e.store.WriteTx, func(ctx context.Context, tx spec.Tx) error {
		created, folders, err := it.putDocTx(ctx, tx, doc)
		var te *toolError
		if errors.As(err, &te) {
			// A folder the model made at the summary's path: no summary,
			// and the outcome still commits.
			it.e.log.Warn("write iteration summary", "run", it.in.RunID, "iteration", it.in.Iteration, "err", err)
			return nil
		}
		if err != nil {
			return err
		}
		it.noteDocs(folders, doc, created)
		return nil
	})
}

func refName(r spec.Ref) string {
	if r.Path != "" {
		return r.Path
	}
	return r.Title
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// progress fingerprints the workspace and checklist of st, leaving out the
// scratchpad and iteration summaries, which change every iteration.
func progress(st runState) string {
	h := sha256.New()
	for _, d := range st.docs {
		// The iterations folder too: the first summary, which creates it,
		// commits with the first iteration's outcome, after this.
		if d.Path == scratchpadPath || strings.HasPrefix(d.Path, scratchpadFolder+"/") || d.Path == iterationsFolder || strings.HasPrefix(d.Path, iterationsFolder+"/") {
			continue
		}
		c := sha256.Sum256([]byte(d.Content))
		fmt.Fprintf(h, "doc\x00%s\x00%s\x00%x\n", d.Path, d.Kind, c[:8])
	}
	for _, t := range st.tasks {
		fmt.Fprintf(h, "task\x00%s\x00%s\x00%v\x00%s\n", t.ID, t.Status, t.Passes, t.Title)
	}
	return "llm:" + hex.EncodeToString(h.Sum(nil))[:32]
}
