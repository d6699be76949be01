package agentcmd_test

import (
	"strings"
	"testing"

	"homework/engine/spec"
)

func TestCommandTranscriptHoldsThePromptTheOutputAndTheChecks(t *testing.T) {
	h := newE2E(t, e2eConfig{})
	wd := h.workdir("transcript")
	script, _ := agent(t, `cat >/dev/null
echo "to stdout"
echo "to stderr" >&2
echo "<promise>COMPLETE</promise>"`)
	cfg := commandRun(script, wd, spec.CheckSpec{Type: spec.CheckCommand, Name: "listing", Argv: []string{"echo", "check says ok"}, TimeoutMS: 10_000})
	cfg.Objective = "Say something on both streams."
	run := h.create(cfg)
	run = h.settled(run.ID)
	if run.Status != spec.StatusCompleted {
		t.Fatalf("run is %s\n%s", run.Status, h.eventDump(run.ID))
	}
	tr, err := h.db.FindTranscript(h.ctx, h.admin.ID, run.ID, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var output strings.Builder
	for _, l := range tr.Lines {
		kinds = append(kinds, l.Kind)
		if l.Kind == spec.TranscriptOutput {
			output.WriteString(l.Text)
		}
	}
	if len(tr.Lines) < 3 || tr.Lines[0].Kind != spec.TranscriptPrompt || !strings.Contains(tr.Lines[0].Text, "Say something on both streams.") {
		t.Fatalf("first line is not the prompt: %q", kinds)
	}
	for _, want := range []string{"to stdout\n", "to stderr\n", "<promise>COMPLETE</promise>"} {
		if !strings.Contains(output.String(), want) {
			t.Errorf("output %q lacks %q", output.String(), want)
		}
	}
	last := tr.Lines[len(tr.Lines)-1]
	if last.Kind != spec.TranscriptCheck || last.Name != "listing" || !strings.Contains(last.Text, "check says ok") {
		t.Errorf("last line = %+v", last)
	}
}
