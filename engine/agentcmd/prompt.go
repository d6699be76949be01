package agentcmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"time"

	"homework/engine/spec"
)

// PromptData is what a prompt template (agent.prompt_template, Go
// text/template syntax) sees. Every text field coming from the run or the
// agent has its promise tags defanged ("<promise>" becomes "[promise]"), so
// the only promise tags in a default prompt are in Instructions.
type PromptData struct {
	RunID     string
	Iteration int
	Objective string
	Workdir   string
	// Progress is the tail of .homework/progress.txt.
	Progress string
	// Feedback is the gate's verdict on the previous iteration (nil on the
	// first); FeedbackText renders it, failing checks with their output
	// tails included.
	Feedback     *spec.Feedback
	FeedbackText string
	// Inbox holds the person's new answers and messages; InboxText renders
	// them.
	Inbox     []spec.InboxItem
	InboxText string
	// Summaries are the last few iteration summaries, newest last.
	Summaries []string
	// Instructions say how to signal completion or a block.
	Instructions string
	// CompleteWord is the word of the completion promise: COMPLETE, or the
	// run's completion token.
	CompleteWord string
}

const defaultTemplate = `# Objective

{{.Objective}}

You are working in {{.Workdir}} (iteration {{.Iteration}} of run {{.RunID}}).
Make real progress on the objective in this iteration, then stop.
{{- if .Progress}}

# Progress so far (tail of .homework/progress.txt)

{{.Progress}}
{{- end}}
{{- if .FeedbackText}}

# Feedback on the previous iteration

{{.FeedbackText}}
{{- end}}
{{- if .InboxText}}

# Messages from the person

{{.InboxText}}
{{- end}}

# How to finish

{{.Instructions}}
`

func instructions(word string) string {
	return fmt.Sprintf(`When the objective is fully met and you have verified it, finish your reply with the completion promise <promise>%s</promise> on a line of its own, optionally followed by a "Summary:" line.
If you cannot make progress without help from the person, finish your reply with <promise>BLOCKED</promise> on a line of its own followed by a "Reason:" line saying what you need.
Otherwise print neither promise: the platform runs you again with this prompt updated.
After each iteration the platform runs the objective checks; a completion claim is accepted only when they all pass, and failures are shown to you next time.
You may add notes for your future self to .homework/progress.txt; the platform also appends an entry there after each iteration.`, word)
}

var promiseTagRE = regexp.MustCompile(`(?i)<(/?)promise>`)

// defang rewrites promise tags in s so text quoted into a prompt can never
// look like an instruction to print one.
func defang(s string) string {
	return promiseTagRE.ReplaceAllString(s, "[${1}promise]")
}

func completeWord(cfg *spec.Config) string {
	if t := strings.TrimSpace(cfg.Completion.Token); t != "" && !strings.ContainsAny(t, "<>\n") && !strings.EqualFold(t, spec.PromiseBlocked) {
		return t
	}
	return spec.PromiseComplete
}

// promptData assembles the prompt's fields for an iteration.
func (e *Executor) promptData(in *spec.Input, workdir string) PromptData {
	cfg := in.Config
	word := completeWord(cfg)
	d := PromptData{
		RunID:        in.RunID,
		Iteration:    in.Iteration,
		Objective:    defang(cfg.Objective),
		Workdir:      workdir,
		Progress:     defang(readProgressTail(filepath.Join(workdir, filepath.FromSlash(ProgressFile)), e.opts.PromptProgressBytes)),
		Inbox:        in.Inbox,
		InboxText:    renderInbox(in.Inbox),
		Instructions: instructions(word),
		CompleteWord: word,
	}
	if in.Feedback != nil {
		fb := *in.Feedback
		d.Feedback = &fb
		d.FeedbackText = renderFeedback(in.Feedback)
	}
	for _, s := range in.Summaries {
		d.Summaries = append(d.Summaries, defang(s))
	}
	return d
}

// buildPrompt renders the run's prompt template, or the default one.
func buildPrompt(cfg *spec.Config, d PromptData) (string, error) {
	src := defaultTemplate
	if cfg.Agent != nil && cfg.Agent.PromptTemplate != "" {
		src = cfg.Agent.PromptTemplate
	}
	t, err := template.New("prompt").Option("missingkey=error").Parse(src)
	if err != nil {
		return "", fmt.Errorf("parse prompt template: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("render prompt template: %w", err)
	}
	return b.String(), nil
}

func renderFeedback(f *spec.Feedback) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The platform decided to %s.", f.Decision)
	for _, r := range f.Reasons {
		fmt.Fprintf(&b, "\n- %s", defang(oneLine(r, 500)))
	}
	if len(f.FailingChecks) > 0 {
		b.WriteString("\n\nThese checks failed:")
		for _, c := range f.FailingChecks {
			fmt.Fprintf(&b, "\n\n## %s (%s)\n%s", defang(c.Name), c.Type, defang(oneLine(c.Message, 1000)))
			if tail := strings.TrimSpace(c.OutputTail); tail != "" {
				fmt.Fprintf(&b, "\nOutput (tail):\n```\n%s\n```", defang(strings.ReplaceAll(tail, "```", "'''")))
			}
		}
	}
	if len(f.RemainingWork) > 0 {
		b.WriteString("\n\nRemaining work:")
		for _, r := range f.RemainingWork {
			fmt.Fprintf(&b, "\n- %s", defang(oneLine(r, 500)))
		}
	}
	if len(f.Questions) > 0 {
		b.WriteString("\n\nQuestions you asked before:")
		for _, q := range f.Questions {
			fmt.Fprintf(&b, "\n- %s", defang(oneLine(q, 500)))
		}
	}
	return b.String()
}

func renderInbox(items []spec.InboxItem) string {
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString("\n\n")
		}
		kind := it.Kind
		if kind == "" {
			kind = "message"
		}
		fmt.Fprintf(&b, "## %s", kind)
		if !it.CreatedAt.IsZero() {
			fmt.Fprintf(&b, " (%s)", it.CreatedAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(&b, "\n%s", defang(strings.TrimSpace(it.Body)))
	}
	return b.String()
}

// readProgressTail returns up to n bytes from the end of the file at name,
// starting at a line boundary; "" when it is missing.
func readProgressTail(name string, n int) string {
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	off := max(fi.Size()-int64(n), 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, int64(n)))
	if err != nil {
		return ""
	}
	s := strings.TrimPrefix(string(b), progressHeader)
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = "[… earlier entries omitted …]\n" + s
	}
	return strings.TrimSpace(strings.ToValidUTF8(s, ""))
}

func samplePromptData() PromptData {
	return PromptData{
		RunID:        "sample",
		Iteration:    1,
		Objective:    "Make the tests pass.",
		Workdir:      "/work",
		Progress:     "## Iteration 1\nDecision: continue",
		Feedback:     &spec.Feedback{Decision: spec.DecisionContinue, Reasons: []string{"checks failed"}},
		FeedbackText: "The platform decided to continue.",
		Inbox:        []spec.InboxItem{{Kind: "message", Body: "hello"}},
		InboxText:    "## message\nhello",
		Summaries:    []string{"did things"},
		Instructions: instructions(spec.PromiseComplete),
		CompleteWord: spec.PromiseComplete,
	}
}
