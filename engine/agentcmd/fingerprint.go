package agentcmd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

var (
	ansiRE      = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07`)
	timestampRE = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?|\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b`)
	durationRE  = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`)
	hexRE       = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b|\b[0-9a-f]{7,}\b`)
	pathRE      = regexp.MustCompile(`(?:[A-Za-z]:)?(?:\.{0,2}/)?(?:[\w.@+-]+/)+[\w.@+-]*`)
	digitsRE    = regexp.MustCompile(`\d+`)
	errorLineRE = regexp.MustCompile(`(?i)error|fail|panic|fatal|exception|traceback|denied|not found|cannot|undefined`)
	spaceRE     = regexp.MustCompile(`[ \t]+`)
)

const (
	summaryLines     = 5
	summaryBytes     = 500
	fingerprintLines = 5
	maxTreeFiles     = 20000
	maxHashFileBytes = 4 << 20
	maxTreeBytes     = 256 << 20
	gitTimeout       = 30 * time.Second
)

// cleanOutput drops terminal escapes and carriage returns.
func cleanOutput(s string) string {
	s = ansiRE.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// OutputHash returns the sha256 of output normalised so that runs that
// differ only in timestamps, durations, hex ids, colours or trailing spaces
// hash the same.
func OutputHash(output string) string {
	s := cleanOutput(output)
	s = timestampRE.ReplaceAllString(s, "<ts>")
	s = durationRE.ReplaceAllString(s, "<dur>")
	s = hexRE.ReplaceAllString(s, "<hex>")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(strings.Join(lines, "\n"))))
	return hex.EncodeToString(sum[:])
}

// normalizeErrorLine strips what varies between two occurrences of the same
// failure: timestamps, durations, hex, paths and numbers.
func normalizeErrorLine(l string) string {
	l = timestampRE.ReplaceAllString(l, "<ts>")
	l = durationRE.ReplaceAllString(l, "<dur>")
	l = hexRE.ReplaceAllString(l, "<hex>")
	l = pathRE.ReplaceAllString(l, "<path>")
	l = digitsRE.ReplaceAllString(l, "<n>")
	l = spaceRE.ReplaceAllString(l, " ")
	return strings.ToLower(strings.TrimSpace(l))
}

// ErrorFingerprint returns a stable fingerprint of a failed agent run: its
// exit code and its last error lines (lines that look like errors, else the
// last lines) with timestamps, numbers, hex and paths stripped, so the same
// failure fingerprints the same across iterations.
func ErrorFingerprint(exitCode int, output string) string {
	var all, errs []string
	for l := range strings.SplitSeq(cleanOutput(output), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		all = append(all, l)
		if errorLineRE.MatchString(l) {
			errs = append(errs, l)
		}
	}
	pick := errs
	if len(pick) == 0 {
		pick = all
	}
	pick = pick[max(len(pick)-fingerprintLines, 0):]
	h := sha256.New()
	fmt.Fprintf(h, "exit %d\n", exitCode)
	for _, l := range pick {
		io.WriteString(h, normalizeErrorLine(l)+"\n")
	}
	return fmt.Sprintf("exit-%d:%s", exitCode, hex.EncodeToString(h.Sum(nil))[:16])
}

// LastErrorLine returns the last line of output that looks like an error
// (else its last non-blank line), trimmed and bounded, or "".
func LastErrorLine(output string) string {
	lines := strings.Split(cleanOutput(output), "\n")
	last := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if last == "" {
			last = l
		}
		if errorLineRE.MatchString(l) {
			return oneLine(l, 300)
		}
	}
	return oneLine(last, 300)
}

// Summarize returns an output's last meaningful lines, bounded.
func Summarize(output string) string {
	var keep []string
	lines := strings.Split(cleanOutput(output), "\n")
	for i := len(lines) - 1; i >= 0 && len(keep) < summaryLines; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.Trim(l, "-=*#_`~ ") == "" {
			continue
		}
		keep = append(keep, oneLine(l, 200))
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	return truncate(strings.Join(keep, "\n"), summaryBytes)
}

// gitCmd returns a git command in dir with a minimal environment, no
// prompts and no optional locks.
func (e *Executor) gitCmd(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.opts.Git, append([]string{"-C", dir, "-c", "core.quotepath=off"}, args...)...)
	env := []string{"GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C"}
	for _, n := range []string{"PATH", "HOME"} {
		if v, ok := e.opts.LookupEnv(n); ok {
			env = append(env, n+"="+v)
		}
	}
	cmd.Env = env
	cmd.WaitDelay = time.Second
	return cmd
}

func (e *Executor) gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := e.gitCmd(ctx, dir, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// isGitRepo reports whether dir is inside a git work tree.
func (e *Executor) isGitRepo(ctx context.Context, dir string) bool {
	if _, err := exec.LookPath(e.opts.Git); err != nil {
		return false
	}
	out, err := e.gitOutput(ctx, dir, "rev-parse", "--is-inside-work-tree")
	return err == nil && strings.TrimSpace(out) == "true"
}

// excludeHomework returns the pathspec that keeps our own memory out of
// diffs and commits' change detection.
func excludeHomework() []string { return []string{"--", ".", ":(exclude).homework"} }

// DiffHash fingerprints the state of the work directory: in a git
// repository with a commit, `git diff HEAD` (binary-safe) plus the names and
// contents of untracked, not ignored files; otherwise a tree hash of the
// files (paths, sizes, content hashes). .homework/ and .git/ never count.
func (e *Executor) DiffHash(ctx context.Context, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	if e.isGitRepo(ctx, dir) {
		if _, err := e.gitOutput(ctx, dir, "rev-parse", "--verify", "-q", "HEAD"); err == nil {
			return e.gitDiffHash(ctx, dir)
		}
	}
	return treeHash(ctx, dir)
}

func (e *Executor) gitDiffHash(ctx context.Context, dir string) (string, error) {
	h := sha256.New()
	io.WriteString(h, "git-diff\n")
	var errb bytes.Buffer
	cmd := e.gitCmd(ctx, dir, append([]string{"diff", "--binary", "--no-color", "--no-ext-diff", "HEAD"}, excludeHomework()...)...)
	cmd.Stdout, cmd.Stderr = h, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git diff: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	out, err := e.gitOutput(ctx, dir, append([]string{"ls-files", "--others", "--exclude-standard", "-z"}, excludeHomework()...)...)
	if err != nil {
		return "", err
	}
	io.WriteString(h, "\x00untracked\n")
	var total int64
	for i, name := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
		if name == "" {
			continue
		}
		if i >= maxTreeFiles {
			io.WriteString(h, "\x00truncated")
			break
		}
		fmt.Fprintf(h, "%s\x00", name)
		n, err := hashFile(h, filepath.Join(dir, filepath.FromSlash(name)), maxTreeBytes-total)
		if err != nil {
			fmt.Fprintf(h, "error\x00")
		}
		total += n
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashFile writes the size and sha256 of (at most maxHashFileBytes of) the
// file at name to h and returns how many bytes it read. Symlinks hash their
// target's name.
func hashFile(h hash.Hash, name string, budget int64) (int64, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return 0, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		t, err := os.Readlink(name)
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(h, "link:%s\x00", t)
		return 0, nil
	}
	if !fi.Mode().IsRegular() {
		fmt.Fprintf(h, "mode:%v\x00", fi.Mode().Type())
		return 0, nil
	}
	fmt.Fprintf(h, "size:%d\x00", fi.Size())
	limit := min(int64(maxHashFileBytes), max(budget, 0))
	if limit == 0 {
		return 0, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fh := sha256.New()
	n, err := io.Copy(fh, io.LimitReader(f, limit))
	if err != nil {
		return n, err
	}
	fmt.Fprintf(h, "sha:%x\x00", fh.Sum(nil))
	return n, nil
}

// treeHash hashes the paths, sizes and contents of dir's files, skipping
// .homework/ and .git/, bounded in file count and bytes read.
func treeHash(ctx context.Context, dir string) (string, error) {
	h := sha256.New()
	io.WriteString(h, "tree\n")
	var files int
	var total int64
	errStop := errors.New("stop")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // an unreadable entry is skipped, not fatal
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
		files++
		if files > maxTreeFiles {
			io.WriteString(h, "\x00truncated")
			return errStop
		}
		fmt.Fprintf(h, "%s\x00", filepath.ToSlash(rel))
		n, _ := hashFile(h, p, maxTreeBytes-total)
		total += n
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
