// Package checks evaluates a run's objective completion checks: a command's
// exit code, a regular expression over the agent output or a document, the
// existence of a document, a prd.json whose stories all pass, and the run's
// checklist being done.
//
// Checks never panic on bad input and never return a Go error: a check that
// cannot be evaluated is reported as failed and errored, with a message that
// says why.
package checks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"homework/engine/spec"
)

// Limits and defaults.
const (
	// MaxChecks is how many checks a run may configure.
	MaxChecks = 20
	// DefaultTimeout bounds a command check without timeout_ms.
	DefaultTimeout = 120 * time.Second
	// MaxTimeout is the largest timeout_ms a command check may ask for.
	MaxTimeout = 30 * time.Minute
	// DefaultOutputTailBytes is how much of a command's combined output a
	// result keeps when Env.OutputTailBytes is zero.
	DefaultOutputTailBytes = 4096
	// DefaultPRDPath is the prd_all_pass path when none is configured.
	DefaultPRDPath = "prd.json"
	// maxDocumentBytes bounds how much of a file under the work directory a
	// content pattern or prd.json check reads.
	maxDocumentBytes = 8 << 20
	maxNameLen       = 200
	maxPatternLen    = 4096
	maxArgs          = 256
)

// Env is what checks may look at.
type Env struct {
	// Workdir is the agent's work directory for command runs; "" for LLM
	// runs. When set, command checks run in it and document paths name
	// files under it.
	Workdir string
	// Output is the iteration's final agent output (target "output").
	Output string
	// Document returns a workspace document's content by path (LLM runs).
	// ok is false when the document does not exist.
	Document func(ctx context.Context, path string) (content string, ok bool, err error)
	// Tasks returns how many checklist tasks the run has and how many are
	// done.
	Tasks func(ctx context.Context) (total, done int, err error)
	// OutputTailBytes is how much of a command's output a result keeps;
	// DefaultOutputTailBytes when zero.
	OutputTailBytes int
	// Environ is the environment of command checks; nil means the server's
	// own environment.
	Environ []string
}

// Validate checks a run's completion checks when the run is created.
// commandAllowed says whether command checks may be used (command runs by
// admins). The error is an EINVALID *spec.Error whose field names the offending
// check, such as "completion.checks[2].pattern".
func Validate(specs []spec.CheckSpec, commandAllowed bool) error {
	if len(specs) > MaxChecks {
		return spec.FieldError("completion.checks", "At most %d checks are allowed, got %d.", MaxChecks, len(specs))
	}
	for i, c := range specs {
		field := func(name string) string { return fmt.Sprintf("completion.checks[%d].%s", i, name) }
		if len(c.Name) > maxNameLen {
			return spec.FieldError(field("name"), "The check name is longer than %d characters.", maxNameLen)
		}
		switch c.Type {
		case spec.CheckCommand:
			if !commandAllowed {
				return spec.FieldError(field("type"), "Command checks are only allowed in command runs, which need an admin and a server started with --allow-command-runs.")
			}
			if len(c.Argv) == 0 || c.Argv[0] == "" {
				return spec.FieldError(field("argv"), "A command check needs argv, such as [\"go\", \"test\", \"./...\"].")
			}
			if len(c.Argv) > maxArgs {
				return spec.FieldError(field("argv"), "A command check may have at most %d arguments.", maxArgs)
			}
			for _, a := range c.Argv {
				if strings.ContainsRune(a, 0) {
					return spec.FieldError(field("argv"), "Arguments may not contain NUL bytes.")
				}
			}
			if c.TimeoutMS < 0 || time.Duration(c.TimeoutMS)*time.Millisecond > MaxTimeout {
				return spec.FieldError(field("timeout_ms"), "timeout_ms must be between 0 (the default, %d) and %d.",
					DefaultTimeout.Milliseconds(), MaxTimeout.Milliseconds())
			}
		case spec.CheckContentPattern:
			if c.Pattern == "" {
				return spec.FieldError(field("pattern"), "A content_pattern check needs a pattern (a regular expression).")
			}
			if len(c.Pattern) > maxPatternLen {
				return spec.FieldError(field("pattern"), "The pattern is longer than %d characters.", maxPatternLen)
			}
			if _, err := regexp.Compile(c.Pattern); err != nil {
				return spec.FieldError(field("pattern"), "The pattern is not a valid regular expression (RE2 syntax): %v.", err)
			}
			if c.Target != "" && c.Target != "output" {
				p, ok := strings.CutPrefix(c.Target, "document:")
				if !ok {
					return spec.FieldError(field("target"), "The target must be \"output\" or \"document:<path>\".")
				}
				if msg := checkPath(p); msg != "" {
					return spec.FieldError(field("target"), "%s", msg)
				}
			}
		case spec.CheckDocumentExists:
			if c.Path == "" {
				return spec.FieldError(field("path"), "A document_exists check needs a path.")
			}
			if msg := checkPath(c.Path); msg != "" {
				return spec.FieldError(field("path"), "%s", msg)
			}
		case spec.CheckPRDAllPass:
			if c.Path != "" {
				if msg := checkPath(c.Path); msg != "" {
					return spec.FieldError(field("path"), "%s", msg)
				}
			}
		case spec.CheckTasksAllDone:
		case "":
			return spec.FieldError(field("type"), "The check type is missing; use one of %s.", typeList)
		default:
			return spec.FieldError(field("type"), "Unknown check type %q; use one of %s.", c.Type, typeList)
		}
	}
	return nil
}

const typeList = "command, content_pattern, document_exists, prd_all_pass, tasks_all_done"

// checkPath returns why p is not an acceptable document path, or "".
// Document paths are relative to the run's root (or work directory) and may
// not climb out of it.
func checkPath(p string) string {
	switch {
	case p == "":
		return "The document path is empty."
	case len(p) > 1024:
		return "The document path is longer than 1024 characters."
	case strings.ContainsRune(p, 0):
		return "The document path may not contain NUL bytes."
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p):
		return "The document path must be relative, such as \"report.md\"."
	}
	for _, elem := range strings.Split(filepath.ToSlash(p), "/") {
		if elem == ".." {
			return "The document path may not contain \"..\"."
		}
	}
	return ""
}

// Run evaluates specs in order and returns one result per spec. Checks run
// one at a time so command checks do not race each other in the work
// directory. Once ctx is done, the remaining checks are reported as errored.
func Run(ctx context.Context, specs []spec.CheckSpec, env Env) []spec.CheckResult {
	results := make([]spec.CheckResult, 0, len(specs))
	for _, c := range specs {
		start := time.Now()
		var r spec.CheckResult
		if err := ctx.Err(); err != nil {
			r = errored("Not evaluated: %v.", err)
		} else {
			r = runOne(ctx, c, env)
		}
		r.Name, r.Type = c.DisplayName(), c.Type
		r.DurationMS = time.Since(start).Milliseconds()
		results = append(results, r)
	}
	return results
}

func runOne(ctx context.Context, c spec.CheckSpec, env Env) (r spec.CheckResult) {
	defer func() {
		// A check is never allowed to take the iteration down.
		if v := recover(); v != nil {
			r = errored("The check crashed: %v.", v)
		}
	}()
	switch c.Type {
	case spec.CheckCommand:
		return runCommand(ctx, c, env)
	case spec.CheckContentPattern:
		return runContentPattern(ctx, c, env)
	case spec.CheckDocumentExists:
		return runDocumentExists(ctx, c, env)
	case spec.CheckPRDAllPass:
		return runPRD(ctx, c, env)
	case spec.CheckTasksAllDone:
		return runTasks(ctx, env)
	default:
		return errored("Unknown check type %q.", c.Type)
	}
}

func errored(format string, args ...any) spec.CheckResult {
	return spec.CheckResult{Errored: true, Message: fmt.Sprintf(format, args...)}
}

func runContentPattern(ctx context.Context, c spec.CheckSpec, env Env) spec.CheckResult {
	re, err := regexp.Compile(c.Pattern)
	if err != nil {
		return errored("The pattern is not a valid regular expression: %v.", err)
	}
	target := c.Target
	if target == "" {
		target = "output"
	}
	var text, what string
	if target == "output" {
		text, what = env.Output, "the agent output"
	} else {
		p, ok := strings.CutPrefix(target, "document:")
		if !ok {
			return errored("The target %q is neither \"output\" nor \"document:<path>\".", target)
		}
		content, found, r := readDocument(ctx, env, p)
		if r != nil {
			return *r
		}
		if !found {
			return spec.CheckResult{Message: fmt.Sprintf("Document %s does not exist.", p)}
		}
		text, what = content, "document "+p
	}
	if loc := re.FindStringIndex(text); loc != nil {
		return spec.CheckResult{Passed: true, Message: fmt.Sprintf("Pattern %s matched %s: %q.", c.Pattern, what, excerpt(text[loc[0]:loc[1]], 120))}
	}
	return spec.CheckResult{Message: fmt.Sprintf("Pattern %s did not match %s.", c.Pattern, what)}
}

func runDocumentExists(ctx context.Context, c spec.CheckSpec, env Env) spec.CheckResult {
	if msg := checkPath(c.Path); msg != "" {
		return errored("%s", msg)
	}
	if env.Workdir != "" {
		full, err := ResolveUnder(env.Workdir, c.Path)
		if errors.Is(err, os.ErrNotExist) {
			return spec.CheckResult{Message: fmt.Sprintf("%s does not exist in the work directory.", c.Path)}
		} else if err != nil {
			return errored("Cannot look for %s: %v.", c.Path, err)
		}
		if _, err := os.Stat(full); err != nil {
			return spec.CheckResult{Message: fmt.Sprintf("%s does not exist in the work directory.", c.Path)}
		}
		return spec.CheckResult{Passed: true, Message: fmt.Sprintf("%s exists.", c.Path)}
	}
	_, found, r := readDocument(ctx, env, c.Path)
	if r != nil {
		return *r
	}
	if !found {
		return spec.CheckResult{Message: fmt.Sprintf("Document %s does not exist.", c.Path)}
	}
	return spec.CheckResult{Passed: true, Message: fmt.Sprintf("Document %s exists.", c.Path)}
}

func runTasks(ctx context.Context, env Env) spec.CheckResult {
	if env.Tasks == nil {
		return errored("This run has no checklist to look at.")
	}
	total, done, err := env.Tasks(ctx)
	if err != nil {
		return errored("Cannot list the run's tasks: %v.", err)
	}
	switch {
	case total == 0:
		return spec.CheckResult{Message: "The run has no tasks yet."}
	case done >= total:
		return spec.CheckResult{Passed: true, Message: fmt.Sprintf("All %d tasks are done.", total)}
	default:
		return spec.CheckResult{Message: fmt.Sprintf("%d of %d tasks are done; %d remain.", done, total, total-done)}
	}
}

// readDocument returns the content of the document at p: a file under
// env.Workdir for command runs, else a workspace document. A non-nil result
// means the check cannot be evaluated and is the check's outcome.
func readDocument(ctx context.Context, env Env, p string) (content string, found bool, res *spec.CheckResult) {
	if msg := checkPath(p); msg != "" {
		r := errored("%s", msg)
		return "", false, &r
	}
	if env.Workdir != "" {
		full, err := ResolveUnder(env.Workdir, p)
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		} else if err != nil {
			r := errored("Cannot read %s: %v.", p, err)
			return "", false, &r
		}
		b, err := readFileLimited(full, maxDocumentBytes)
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		} else if err != nil {
			r := errored("Cannot read %s: %v.", p, err)
			return "", false, &r
		}
		return string(b), true, nil
	}
	if env.Document == nil {
		r := errored("This run has no documents to look at.")
		return "", false, &r
	}
	content, found, err := env.Document(ctx, path.Clean(p))
	if err != nil {
		r := errored("Cannot read document %s: %v.", p, err)
		return "", false, &r
	}
	return content, found, nil
}

// ErrOutside is returned by ResolveUnder for a path that resolves outside
// its directory.
var ErrOutside = errors.New("path resolves outside the work directory")

// ResolveUnder returns the real path of rel under dir, following symlinks.
// It returns an error wrapping os.ErrNotExist when the file does not exist,
// and ErrOutside when the path (through ".." or a symlink) leaves dir.
func ResolveUnder(dir, rel string) (string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("resolve work directory: %w", err)
	}
	full, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return "", err
	}
	if !Within(root, full) {
		return "", ErrOutside
	}
	return full, nil
}

// Within reports whether path p is root or lies under it. Both must be
// clean absolute paths.
func Within(root, p string) bool {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return r == "." || (r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)))
}

func readFileLimited(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory", filepath.Base(name))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("file is larger than %d bytes", limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("file is larger than %d bytes", limit)
	}
	return b, nil
}

// excerpt returns s shortened to at most n bytes on a rune boundary.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
