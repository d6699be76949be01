package agentcmd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/google/renameio/v2"

	"homework/engine/spec"
)

// What an iteration and a run changed in the work directory. Each iteration
// snapshots the files (path, size, modification time, content hash) before
// and after the agent runs; in a git repository the files are the tracked
// and untracked, not ignored ones, plus HEAD. The snapshots live under
// .homework/runs/<run id>/: start.json (the run's first state) and
// last.json (the last one, whose hashes are reused for unchanged files).

// fileSig identifies one file's content.
type fileSig struct {
	Size  int64  `json:"s"`
	MTime int64  `json:"m"`
	Hash  string `json:"h"`
}

// snapshot is a work directory's state.
type snapshot struct {
	Head      string             `json:"head,omitempty"`
	Files     map[string]fileSig `json:"files"`
	Truncated bool               `json:"truncated,omitempty"`
}

// Changes lists created, modified and deleted paths (slash-separated,
// relative to the work directory), sorted, and the commits made.
type Changes struct {
	Created  []string `json:"created,omitempty"`
	Modified []string `json:"modified,omitempty"`
	Deleted  []string `json:"deleted,omitempty"`
	Commits  []Commit `json:"commits,omitempty"`
	DiffStat string   `json:"diff_stat,omitempty"`
}

// Commit is one commit made during a run.
type Commit struct {
	Hash    string `json:"hash"`
	Subject string `json:"subject"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.Created) == 0 && len(c.Modified) == 0 && len(c.Deleted) == 0 && len(c.Commits) == 0
}

// Files returns how many files changed.
func (c Changes) Files() int { return len(c.Created) + len(c.Modified) + len(c.Deleted) }

var runIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,100}$`)

// stateDir is where a run keeps its snapshots in the work directory; "" for
// a run id that cannot be a directory name.
func stateDir(wd, runID string) string {
	if !runIDRE.MatchString(runID) {
		return ""
	}
	return filepath.Join(wd, ".homework", "runs", runID)
}

// ensureStateDir creates the run's state directory, and a .gitignore that
// keeps every run's state out of git (commit_each_iteration adds all),
// returning the directory or "" when it cannot.
func ensureStateDir(wd, runID string) string {
	dir := stateDir(wd, runID)
	if dir == "" || os.MkdirAll(dir, 0o755) != nil {
		return ""
	}
	ignore := filepath.Join(filepath.Dir(dir), ".gitignore")
	if _, err := os.Stat(ignore); errors.Is(err, fs.ErrNotExist) {
		renameio.WriteFile(ignore, []byte("# Homework's per-run state: not part of the work.\n*\n"), 0o644)
	}
	return dir
}

func loadSnapshot(name string) *snapshot {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	var s snapshot
	if json.Unmarshal(b, &s) != nil || s.Files == nil {
		return nil
	}
	return &s
}

func saveSnapshot(name string, s *snapshot) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return renameio.WriteFile(name, b, 0o644)
}

// takeSnapshot records dir's files, reusing prev's hashes for files whose
// size and modification time did not change.
func (e *Executor) takeSnapshot(ctx context.Context, dir string, prev *snapshot) (*snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	s := &snapshot{Files: map[string]fileSig{}}
	var budget int64 = maxTreeBytes
	add := func(rel string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() {
			return // gone, or a submodule
		}
		sig := fileSig{Size: fi.Size(), MTime: fi.ModTime().UnixNano()}
		if prev != nil {
			if old, ok := prev.Files[rel]; ok && old.Size == sig.Size && old.MTime == sig.MTime {
				s.Files[rel] = old
				return
			}
		}
		h := sha256.New()
		n, _ := hashFile(h, p, budget)
		budget -= n
		sig.Hash = hex.EncodeToString(h.Sum(nil))[:32]
		s.Files[rel] = sig
	}
	if e.isGitRepo(ctx, dir) {
		if head, err := e.gitOutput(ctx, dir, "rev-parse", "--verify", "-q", "HEAD"); err == nil {
			s.Head = strings.TrimSpace(head)
		}
		out, err := e.gitOutput(ctx, dir, append([]string{"ls-files", "-z", "--cached", "--others", "--exclude-standard"}, excludeHomework()...)...)
		if err != nil {
			return nil, err
		}
		for i, name := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
			if name == "" {
				continue
			}
			if i >= maxTreeFiles {
				s.Truncated = true
				break
			}
			add(name)
		}
		return s, nil
	}
	errStop := errors.New("stop")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if d.Name() == ".git" || rel == ".homework" {
				return filepath.SkipDir
			}
			return nil
		}
		if len(s.Files) >= maxTreeFiles {
			s.Truncated = true
			return errStop
		}
		add(filepath.ToSlash(rel))
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	return s, nil
}

// compare returns what changed from a to b, with the commits made between
// their HEADs and, in git, the diff stat.
func (e *Executor) compare(ctx context.Context, dir string, a, b *snapshot) Changes {
	var c Changes
	for p, sb := range b.Files {
		if sa, ok := a.Files[p]; !ok {
			c.Created = append(c.Created, p)
		} else if sa.Hash != sb.Hash || sa.Size != sb.Size {
			c.Modified = append(c.Modified, p)
		}
	}
	for p := range a.Files {
		if _, ok := b.Files[p]; !ok {
			c.Deleted = append(c.Deleted, p)
		}
	}
	sort.Strings(c.Created)
	sort.Strings(c.Modified)
	sort.Strings(c.Deleted)
	if a.Head != "" && b.Head != "" && (a.Head != b.Head || c.Files() > 0) {
		ctx, cancel := context.WithTimeout(ctx, gitTimeout)
		defer cancel()
		if a.Head != b.Head {
			if out, err := e.gitOutput(ctx, dir, "log", "--format=%H %s", "--reverse", "-n", "200", a.Head+".."+b.Head); err == nil {
				for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
					if h, s, ok := strings.Cut(l, " "); ok {
						c.Commits = append(c.Commits, Commit{Hash: h, Subject: oneLine(s, 200)})
					}
				}
			}
		}
		if out, err := e.gitOutput(ctx, dir, append([]string{"diff", "--stat=100", "--no-color", a.Head}, excludeHomework()...)...); err == nil {
			c.DiffStat = truncate(strings.TrimRight(out, "\n"), 4000)
		}
	}
	return c
}

// refs returns the changes as iteration artifacts: created files, and
// modified or deleted files and commits as updates.
func (c Changes) refs() spec.Artifacts {
	var a spec.Artifacts
	for _, p := range c.Created {
		a.Created = append(a.Created, spec.Ref{Type: "file", ID: p, Path: p, Title: "created"})
	}
	for _, p := range c.Modified {
		a.Updated = append(a.Updated, spec.Ref{Type: "file", ID: p, Path: p, Title: "modified"})
	}
	for _, p := range c.Deleted {
		a.Updated = append(a.Updated, spec.Ref{Type: "file", ID: p, Path: p, Title: "deleted"})
	}
	for _, cm := range c.Commits {
		a.Created = append(a.Created, spec.Ref{Type: "commit", ID: cm.Hash, Title: cm.Subject})
	}
	return a
}

// describe renders the changes for a person, bounded.
func (c Changes) describe(limit int) string {
	if c.Empty() {
		return "No files changed."
	}
	var b strings.Builder
	list := func(label string, ps []string) {
		if len(ps) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s (%d): ", label, len(ps))
		for i, p := range ps {
			if i == limit {
				fmt.Fprintf(&b, ", … %d more", len(ps)-limit)
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(p)
		}
		b.WriteString("\n")
	}
	list("Created", c.Created)
	list("Modified", c.Modified)
	list("Deleted", c.Deleted)
	if len(c.Commits) > 0 {
		fmt.Fprintf(&b, "Commits (%d):\n", len(c.Commits))
		for i, cm := range c.Commits {
			if i == limit {
				fmt.Fprintf(&b, "- … %d more\n", len(c.Commits)-limit)
				break
			}
			fmt.Fprintf(&b, "- %.12s %s\n", cm.Hash, cm.Subject)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// iterationChanges wraps an agent run: before takes the work directory's
// snapshot (saving the run's start snapshot the first time), after compares
// the state with it and saves the new last snapshot. Snapshot failures only
// lose the change list, never the iteration.
type iterationChanges struct {
	e      *Executor
	wd     string
	dir    string
	before *snapshot
}

func (e *Executor) beginChanges(ctx context.Context, wd, runID string) *iterationChanges {
	ic := &iterationChanges{e: e, wd: wd, dir: ensureStateDir(wd, runID)}
	if ic.dir == "" {
		return ic
	}
	prev := loadSnapshot(filepath.Join(ic.dir, "last.json"))
	s, err := e.takeSnapshot(ctx, wd, prev)
	if err != nil {
		return ic
	}
	ic.before = s
	if _, err := os.Stat(filepath.Join(ic.dir, "start.json")); errors.Is(err, fs.ErrNotExist) {
		saveSnapshot(filepath.Join(ic.dir, "start.json"), s)
	}
	return ic
}

// end returns what the iteration changed; ok is false when it cannot say.
func (ic *iterationChanges) end(ctx context.Context) (Changes, bool) {
	if ic.before == nil {
		return Changes{}, false
	}
	after, err := ic.e.takeSnapshot(context.WithoutCancel(ctx), ic.wd, ic.before)
	if err != nil {
		return Changes{}, false
	}
	saveSnapshot(filepath.Join(ic.dir, "last.json"), after)
	return ic.e.compare(context.WithoutCancel(ctx), ic.wd, ic.before, after), true
}

// RunChanges returns what a run changed in its work directory since its
// first iteration, and false when the run has no start snapshot there.
func (e *Executor) RunChanges(ctx context.Context, wd, runID string) (Changes, bool) {
	dir := stateDir(wd, runID)
	if dir == "" {
		return Changes{}, false
	}
	start := loadSnapshot(filepath.Join(dir, "start.json"))
	if start == nil {
		return Changes{}, false
	}
	now, err := e.takeSnapshot(ctx, wd, loadSnapshot(filepath.Join(dir, "last.json")))
	if err != nil {
		return Changes{}, false
	}
	return e.compare(ctx, wd, start, now), true
}
