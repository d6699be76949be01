package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/renameio/v2"

	"homework/engine/spec"
)

const (
	progressHeader = "# Homework progress log\n\nThe platform appends one entry per iteration after it decides what happens next.\nThe oldest entries are folded into a summary so this file stays small.\n"
	summaryHeading = "## Summary of earlier iterations"
	entryHeading   = "## Iteration "
	tallyPrefix    = "Tally: "
	// maxProgressRead bounds how much of an existing progress.txt is read
	// (the agent may write to it too); older bytes are treated as dropped.
	maxProgressRead = 1 << 20
)

// AfterGate appends one entry for the iteration to
// <workdir>/.homework/progress.txt: what happened (summary, exit or error,
// promise), the checks, and the gate's decision with its reasons. The file is
// rewritten atomically (a temporary file in the same directory, fsync,
// rename) and bounded by Options.ProgressMaxBytes and ProgressMaxEntries:
// the oldest entries are folded into a deterministic summary paragraph.
//
// When the run sets agent.commit_each_iteration and the work directory is a
// git repository the iteration changed (outside .homework/), it then commits
// everything with the message "homework: run <id> iteration <n>".
func (e *Executor) AfterGate(ctx context.Context, in *spec.Input, res *spec.Result, results []spec.CheckResult, d spec.Decision) error {
	if in == nil || in.Config == nil || in.Config.Agent == nil || in.Config.Agent.Workdir == "" {
		return nil
	}
	wd := in.Config.Agent.Workdir
	entry := e.formatEntry(in, res, results, d)
	if err := e.appendProgress(filepath.Join(wd, filepath.FromSlash(ProgressFile)), entry); err != nil {
		return err
	}
	if in.Config.Agent.CommitEach {
		if err := e.commitIteration(ctx, wd, in.RunID, in.Iteration); err != nil {
			return err
		}
	}
	return nil
}

// formatEntry renders one progress entry. Its "Outcome:" and "Decision:"
// lines feed the summary tally when the entry is folded.
func (e *Executor) formatEntry(in *spec.Input, res *spec.Result, results []spec.CheckResult, d spec.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d (%s)\n", entryHeading, in.Iteration, e.opts.Now().UTC().Format("2006-01-02 15:04:05Z"))
	if res == nil {
		res = &spec.Result{}
	}
	outcome := "ok"
	switch {
	case res.Fatal != nil:
		outcome = "fatal"
	case res.ErrorFingerprint == "timeout":
		outcome = "timeout"
	case res.Error != "":
		outcome = "error"
	}
	fmt.Fprintf(&b, "Outcome: %s\n", outcome)
	if res.Error != "" {
		fmt.Fprintf(&b, "Error: %s\n", defang(oneLine(res.Error, 300)))
	}
	if res.Promise != nil {
		p := res.Promise.Kind
		if res.Promise.Reason != "" {
			p += " — " + oneLine(res.Promise.Reason, 300)
		}
		fmt.Fprintf(&b, "Promise: %s\n", defang(p))
	}
	if s := strings.TrimSpace(res.Summary); s != "" {
		fmt.Fprintf(&b, "Summary: %s\n", defang(oneLine(s, 600)))
	}
	if len(results) == 0 {
		b.WriteString("Checks: none configured\n")
	} else {
		var passed, failed []string
		for _, r := range results {
			if r.Passed {
				passed = append(passed, r.Name)
			} else {
				name := r.Name
				if r.Errored {
					name += " (error)"
				}
				failed = append(failed, name)
			}
		}
		fmt.Fprintf(&b, "Checks: %d/%d passed", len(passed), len(results))
		if len(failed) > 0 {
			fmt.Fprintf(&b, "; failing: %s", defang(oneLine(strings.Join(failed, ", "), 400)))
		}
		b.WriteString("\n")
	}
	decision := d.Decision
	if decision == "" {
		decision = "unknown"
	}
	fmt.Fprintf(&b, "Decision: %s", decision)
	if d.StopReason != "" {
		fmt.Fprintf(&b, " (%s)", d.StopReason)
	} else if d.WaitReason != "" {
		fmt.Fprintf(&b, " (%s)", d.WaitReason)
	}
	if len(d.Reasons) > 0 {
		fmt.Fprintf(&b, " — %s", defang(oneLine(strings.Join(d.Reasons, "; "), 600)))
	}
	b.WriteString("\n")
	return b.String()
}

// appendProgress adds entry to the progress file, compacts it, and replaces
// the file atomically.
func (e *Executor) appendProgress(name, entry string) error {
	e.progressMu.Lock()
	defer e.progressMu.Unlock()
	old, err := readTail(name, maxProgressRead)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("agentcmd: read progress: %w", err)
	}
	log := parseProgress(old)
	log.blocks = append(log.blocks, block{text: entry, iteration: entryIteration(entry), isEntry: true})
	log.compact(e.opts.ProgressMaxBytes, e.opts.ProgressMaxEntries)
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("agentcmd: create .homework: %w", err)
	}
	// renameio writes a temporary file, syncs it and renames it over name,
	// so a reader (the agent) sees the old content or the new, never a mix.
	if err := renameio.WriteFile(name, []byte(log.String()), 0o644); err != nil {
		return fmt.Errorf("agentcmd: write progress: %w", err)
	}
	return nil
}

// readTail returns at most n bytes from the end of the file.
func readTail(name string, n int64) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	off := max(fi.Size()-n, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, n))
	if err != nil {
		return "", err
	}
	s := strings.ToValidUTF8(string(b), "")
	if off > 0 {
		// Start at a section boundary; the rest is lost like a dropped block.
		if i := strings.Index(s, "\n## "); i >= 0 {
			s = s[i+1:]
		}
	}
	return s, nil
}

// block is one "## " section of the progress file.
type block struct {
	text      string
	iteration int
	isEntry   bool
}

// progressLog is a parsed progress file: the header, the summary of folded
// entries, and the remaining sections in order.
type progressLog struct {
	header string
	tally  tally
	blocks []block
}

// tally summarises folded sections.
type tally struct {
	entries, notes, first, last int
	decisions, outcomes         map[string]int
}

func parseProgress(s string) *progressLog {
	l := &progressLog{header: progressHeader, tally: tally{decisions: map[string]int{}, outcomes: map[string]int{}}}
	if strings.TrimSpace(s) == "" {
		return l
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	var sections []string
	if i := strings.Index(s, "## "); i == 0 {
		sections = splitSections(s)
	} else if i := strings.Index(s, "\n## "); i >= 0 {
		l.header = strings.TrimRight(s[:i+1], "\n") + "\n"
		sections = splitSections(s[i+1:])
	} else {
		l.header = strings.TrimRight(s, "\n") + "\n"
	}
	for _, sec := range sections {
		switch {
		case strings.HasPrefix(sec, summaryHeading):
			l.tally.parse(sec)
		case strings.HasPrefix(sec, entryHeading):
			l.blocks = append(l.blocks, block{text: sec, iteration: entryIteration(sec), isEntry: true})
		default:
			l.blocks = append(l.blocks, block{text: sec})
		}
	}
	return l
}

// splitSections splits s, which starts with "## ", at every line starting
// with "## ".
func splitSections(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.Index(s[1:], "\n## ")
		if i < 0 {
			out = append(out, strings.TrimRight(s, "\n")+"\n")
			break
		}
		out = append(out, strings.TrimRight(s[:i+2], "\n")+"\n")
		s = s[i+2:]
	}
	return out
}

func entryIteration(s string) int {
	rest := strings.TrimPrefix(s, entryHeading)
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	n, _ := strconv.Atoi(rest[:end])
	return n
}

func lineValue(s, prefix string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// parse reads a summary section's "Tally:" line.
func (t *tally) parse(sec string) {
	for f := range strings.FieldsSeq(lineValue(sec, tallyPrefix)) {
		k, v, ok := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			continue
		}
		switch {
		case k == "entries":
			t.entries = n
		case k == "notes":
			t.notes = n
		case k == "first":
			t.first = n
		case k == "last":
			t.last = n
		case strings.HasPrefix(k, "d."):
			t.decisions[k[2:]] = n
		case strings.HasPrefix(k, "o."):
			t.outcomes[k[2:]] = n
		}
	}
}

func (t *tally) add(b block) {
	if !b.isEntry {
		t.notes++
		return
	}
	t.entries++
	if b.iteration > 0 {
		if t.first == 0 || b.iteration < t.first {
			t.first = b.iteration
		}
		t.last = max(t.last, b.iteration)
	}
	d, _, _ := strings.Cut(lineValue(b.text, "Decision: "), " ")
	if d == "" {
		d = "unknown"
	}
	t.decisions[d]++
	o := lineValue(b.text, "Outcome: ")
	if o == "" {
		o = "unknown"
	}
	t.outcomes[o]++
}

func (t *tally) empty() bool { return t.entries == 0 && t.notes == 0 }

// String renders the summary paragraph; it depends only on the tally.
func (t *tally) String() string {
	var b strings.Builder
	b.WriteString(summaryHeading + "\n")
	if t.entries > 0 {
		fmt.Fprintf(&b, "%d earlier iteration entries (iterations %d to %d) were folded into this summary.\n", t.entries, t.first, t.last)
		fmt.Fprintf(&b, "Decisions: %s. Outcomes: %s.\n", formatCounts(t.decisions), formatCounts(t.outcomes))
	}
	if t.notes > 0 {
		fmt.Fprintf(&b, "%d other notes were dropped.\n", t.notes)
	}
	fields := []string{fmt.Sprintf("entries=%d", t.entries), fmt.Sprintf("first=%d", t.first), fmt.Sprintf("last=%d", t.last), fmt.Sprintf("notes=%d", t.notes)}
	for _, k := range sortedKeys(t.decisions) {
		fields = append(fields, fmt.Sprintf("d.%s=%d", k, t.decisions[k]))
	}
	for _, k := range sortedKeys(t.outcomes) {
		fields = append(fields, fmt.Sprintf("o.%s=%d", k, t.outcomes[k]))
	}
	b.WriteString(tallyPrefix + strings.Join(fields, " ") + "\n")
	return b.String()
}

func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		// Keys come from the file; keep them to one safe word.
		if k != "" && !strings.ContainsAny(k, " =\n") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func (l *progressLog) entryCount() int {
	n := 0
	for _, b := range l.blocks {
		if b.isEntry {
			n++
		}
	}
	return n
}

// compact folds the oldest sections into the tally while the log is over
// maxBytes or maxEntries, down to three quarters of each, always keeping the
// newest section. A section too large on its own is cut.
func (l *progressLog) compact(maxBytes, maxEntries int) {
	if len(l.String()) <= maxBytes && l.entryCount() <= maxEntries {
		return
	}
	targetBytes, targetEntries := maxBytes*3/4, max(maxEntries*3/4, 1)
	if len(l.header) > maxBytes/8 {
		l.header = truncate(l.header, maxBytes/8) + "\n"
	}
	for len(l.blocks) > 1 && (len(l.String()) > targetBytes || l.entryCount() > targetEntries) {
		l.tally.add(l.blocks[0])
		l.blocks = l.blocks[1:]
	}
	if over := len(l.String()) - maxBytes; over > 0 && len(l.blocks) == 1 {
		t := l.blocks[0].text
		keep := max(len(t)-over-64, 0)
		head, _, _ := strings.Cut(t, "\n")
		l.blocks[0].text = truncate(head, 200) + "\n[… cut to keep progress.txt small …]\n" + t[len(t)-min(keep, len(t)):]
		l.blocks[0].text = strings.ToValidUTF8(l.blocks[0].text, "")
	}
}

func (l *progressLog) String() string {
	var b strings.Builder
	b.WriteString(l.header)
	if !l.tally.empty() {
		b.WriteString("\n" + l.tally.String())
	}
	for _, bl := range l.blocks {
		b.WriteString("\n" + bl.text)
	}
	return b.String()
}

// commitIteration commits the work directory's changes when there are any
// outside .homework/, with an explicit author so it works without git
// configuration. Hooks and signing are skipped: the commit is the
// platform's checkpoint, not the agent's.
func (e *Executor) commitIteration(ctx context.Context, wd, runID string, iteration int) error {
	if !e.isGitRepo(ctx, wd) {
		return nil
	}
	status, err := e.gitOutput(ctx, wd, append([]string{"status", "--porcelain", "--untracked-files=all"}, excludeHomework()...)...)
	if err != nil {
		return fmt.Errorf("agentcmd: commit: %w", err)
	}
	if strings.TrimSpace(status) == "" {
		return nil
	}
	if _, err := e.gitOutput(ctx, wd, "add", "-A", "--", "."); err != nil {
		return fmt.Errorf("agentcmd: commit: %w", err)
	}
	msg := fmt.Sprintf("homework: run %s iteration %d", runID, iteration)
	if _, err := e.gitOutput(ctx, wd, "-c", "user.name=Homework", "-c", "user.email=homework@localhost", "-c", "commit.gpgsign=false",
		"commit", "-q", "--no-verify", "-m", msg); err != nil {
		return fmt.Errorf("agentcmd: commit: %w", err)
	}
	return nil
}
