package checks_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"homework/engine/checks"
	"homework/engine/spec"
)

func TestValidate(t *testing.T) {
	many := make([]spec.CheckSpec, checks.MaxChecks+1)
	for i := range many {
		many[i] = spec.CheckSpec{Type: spec.CheckTasksAllDone}
	}
	tests := []struct {
		name           string
		specs          []spec.CheckSpec
		commandAllowed bool
		field          string // "" means valid
	}{
		{"no checks are valid", nil, false, ""},
		{"every type configured well is valid", []spec.CheckSpec{
			{Type: spec.CheckCommand, Argv: []string{"go", "test"}, TimeoutMS: 1000},
			{Type: spec.CheckContentPattern, Pattern: "(?i)done", Target: "output"},
			{Type: spec.CheckContentPattern, Pattern: "x", Target: "document:notes/report.md"},
			{Type: spec.CheckContentPattern, Pattern: "x"},
			{Type: spec.CheckDocumentExists, Path: "report.md"},
			{Type: spec.CheckPRDAllPass},
			{Type: spec.CheckPRDAllPass, Path: "plan/prd.json"},
			{Type: spec.CheckTasksAllDone},
		}, true, ""},
		{"an unknown type is refused", []spec.CheckSpec{{Type: "vibes"}}, true, "completion.checks[0].type"},
		{"a missing type is refused", []spec.CheckSpec{{}}, true, "completion.checks[0].type"},
		{"a command check is refused when commands are not allowed", []spec.CheckSpec{{Type: spec.CheckCommand, Argv: []string{"true"}}}, false, "completion.checks[0].type"},
		{"a command check without argv is refused", []spec.CheckSpec{{Type: spec.CheckTasksAllDone}, {Type: spec.CheckCommand}}, true, "completion.checks[1].argv"},
		{"a command check with an empty program is refused", []spec.CheckSpec{{Type: spec.CheckCommand, Argv: []string{""}}}, true, "completion.checks[0].argv"},
		{"a negative timeout is refused", []spec.CheckSpec{{Type: spec.CheckCommand, Argv: []string{"true"}, TimeoutMS: -1}}, true, "completion.checks[0].timeout_ms"},
		{"a timeout over the limit is refused", []spec.CheckSpec{{Type: spec.CheckCommand, Argv: []string{"true"}, TimeoutMS: checks.MaxTimeout.Milliseconds() + 1}}, true, "completion.checks[0].timeout_ms"},
		{"a bad regex is refused", []spec.CheckSpec{{Type: spec.CheckContentPattern, Pattern: "(unclosed"}}, true, "completion.checks[0].pattern"},
		{"a Perl-only regex is refused", []spec.CheckSpec{{Type: spec.CheckContentPattern, Pattern: `(?=look)`}}, true, "completion.checks[0].pattern"},
		{"an empty pattern is refused", []spec.CheckSpec{{Type: spec.CheckContentPattern}}, true, "completion.checks[0].pattern"},
		{"an unknown target is refused", []spec.CheckSpec{{Type: spec.CheckContentPattern, Pattern: "x", Target: "stdout"}}, true, "completion.checks[0].target"},
		{"a document target without a path is refused", []spec.CheckSpec{{Type: spec.CheckContentPattern, Pattern: "x", Target: "document:"}}, true, "completion.checks[0].target"},
		{"a document target climbing out is refused", []spec.CheckSpec{{Type: spec.CheckContentPattern, Pattern: "x", Target: "document:../../etc/passwd"}}, true, "completion.checks[0].target"},
		{"document_exists without a path is refused", []spec.CheckSpec{{Type: spec.CheckDocumentExists}}, true, "completion.checks[0].path"},
		{"document_exists climbing out is refused", []spec.CheckSpec{{Type: spec.CheckDocumentExists, Path: "a/../../b"}}, true, "completion.checks[0].path"},
		{"an absolute document path is refused", []spec.CheckSpec{{Type: spec.CheckDocumentExists, Path: "/etc/passwd"}}, true, "completion.checks[0].path"},
		{"prd_all_pass climbing out is refused", []spec.CheckSpec{{Type: spec.CheckPRDAllPass, Path: "../prd.json"}}, true, "completion.checks[0].path"},
		{"too many checks are refused", many, true, "completion.checks"},
		{"an overlong name is refused", []spec.CheckSpec{{Type: spec.CheckTasksAllDone, Name: strings.Repeat("n", 300)}}, true, "completion.checks[0].name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checks.Validate(tt.specs, tt.commandAllowed)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var e *spec.Error
			if !errors.As(err, &e) {
				t.Fatalf("Validate = %v, want a *spec.Error", err)
			}
			if e.Code != spec.EINVALID || e.Field != tt.field {
				t.Fatalf("Validate = code %q field %q (%s), want %q %q", e.Code, e.Field, e.Message, spec.EINVALID, tt.field)
			}
			if e.Message == "" {
				t.Fatal("the error has no message")
			}
		})
	}
}

func runOne(t *testing.T, c spec.CheckSpec, env checks.Env) spec.CheckResult {
	t.Helper()
	res := checks.Run(context.Background(), []spec.CheckSpec{c}, env)
	if len(res) != 1 {
		t.Fatalf("Run returned %d results", len(res))
	}
	if res[0].Type != c.Type || res[0].Name != c.DisplayName() {
		t.Fatalf("result is named %q/%q", res[0].Name, res[0].Type)
	}
	return res[0]
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCommand(t *testing.T) {
	dir := t.TempDir()
	t.Run("exit 0 passes and runs in the work directory", func(t *testing.T) {
		writeFile(t, dir, "marker", "here")
		r := runOne(t, spec.CheckSpec{Type: spec.CheckCommand, Argv: []string{"sh", "-c", "cat marker"}}, checks.Env{Workdir: dir})
		if !r.Passed || r.Errored || r.OutputTail != "here" {
			t.Fatalf("result = %+v", r)
		}
	})
	t.Run("a non-zero exit fails and keeps the output tail", func(t *testing.T) {
		r := runOne(t, spec.CheckSpec{Type: spec.CheckCommand, Name: "tests",
			Argv: []string{"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; echo FAIL: boom >&2; exit 3"}},
			checks.Env{Workdir: dir, OutputTailBytes: 100})
		if r.Passed || r.Errored {
			t.Fatalf("result = %+v", r)
		}
		if !strings.Contains(r.Message, "exit status 3") {
			t.Fatalf("message = %q", r.Message)
		}
		if !strings.HasSuffix(r.OutputTail, "FAIL: boom\n") || len(r.OutputTail) > 100+len("…") {
			t.Fatalf("output tail = %q", r.OutputTail)
		}
	})
	t.Run("a missing program is an errored check", func(t *testing.T) {
		r := runOne(t, spec.CheckSpec{Type: spec.CheckCommand, Argv: []string{"no-such-program-here"}}, checks.Env{Workdir: dir})
		if r.Passed || !r.Errored || !strings.Contains(r.Message, "no-such-program-here") {
			t.Fatalf("result = %+v", r)
		}
	})
	t.Run("a timeout fails and kills the command", func(t *testing.T) {
		r := runOne(t, spec.CheckSpec{Type: spec.CheckCommand, Argv: []string{"sh", "-c", "echo start; sleep 60"}, TimeoutMS: 100}, checks.Env{Workdir: dir})
		if r.Passed || !strings.Contains(r.Message, "timed out") || r.OutputTail != "start\n" {
			t.Fatalf("result = %+v", r)
		}
	})
	t.Run("without a work directory it is errored", func(t *testing.T) {
		r := runOne(t, spec.CheckSpec{Type: spec.CheckCommand, Argv: []string{"true"}}, checks.Env{})
		if !r.Errored {
			t.Fatalf("result = %+v", r)
		}
	})
	t.Run("a cancelled context errors the remaining checks", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := checks.Run(ctx, []spec.CheckSpec{{Type: spec.CheckTasksAllDone}}, checks.Env{})
		if !res[0].Errored || res[0].Passed {
			t.Fatalf("result = %+v", res[0])
		}
	})
}

func TestContentPattern(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "report.md", "# Report\nRecommendation: use modernc.\n")
	outside := t.TempDir()
	writeFile(t, outside, "secret.md", "Recommendation: leak")
	if err := os.Symlink(filepath.Join(outside, "secret.md"), filepath.Join(dir, "link.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("report.md", filepath.Join(dir, "inside-link.md")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		check           spec.CheckSpec
		env             checks.Env
		passed, errored bool
	}{
		{"the output matches", spec.CheckSpec{Pattern: `(?i)all tests pass`}, checks.Env{Output: "ok\nALL TESTS PASS\n"}, true, false},
		{"the output does not match", spec.CheckSpec{Pattern: `done`, Target: "output"}, checks.Env{Output: "working"}, false, false},
		{"a file under the work directory matches", spec.CheckSpec{Pattern: `(?m)^Recommendation:`, Target: "document:report.md"}, checks.Env{Workdir: dir}, true, false},
		{"a symlink inside the work directory is followed", spec.CheckSpec{Pattern: `Recommendation`, Target: "document:inside-link.md"}, checks.Env{Workdir: dir}, true, false},
		{"a symlink leaving the work directory is errored", spec.CheckSpec{Pattern: `Recommendation`, Target: "document:link.md"}, checks.Env{Workdir: dir}, false, true},
		{"a missing file fails", spec.CheckSpec{Pattern: `x`, Target: "document:nope.md"}, checks.Env{Workdir: dir}, false, false},
		{"a workspace document matches", spec.CheckSpec{Pattern: `verdict`, Target: "document:report.md"}, checks.Env{Document: docs(map[string]string{"report.md": "the verdict"})}, true, false},
		{"a missing workspace document fails", spec.CheckSpec{Pattern: `verdict`, Target: "document:other.md"}, checks.Env{Document: docs(map[string]string{"report.md": "the verdict"})}, false, false},
		{"a failing document store is errored", spec.CheckSpec{Pattern: `x`, Target: "document:a.md"}, checks.Env{Document: func(context.Context, string) (string, bool, error) {
			return "", false, errors.New("db down")
		}}, false, true},
		{"a bad pattern at run time is errored", spec.CheckSpec{Pattern: `(`}, checks.Env{Output: "x"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check.Type = spec.CheckContentPattern
			r := runOne(t, tt.check, tt.env)
			if r.Passed != tt.passed || r.Errored != tt.errored {
				t.Fatalf("result = %+v", r)
			}
		})
	}
}

func docs(m map[string]string) func(context.Context, string) (string, bool, error) {
	return func(_ context.Context, p string) (string, bool, error) {
		c, ok := m[p]
		return c, ok, nil
	}
}

func TestDocumentExists(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "out/report.md", "x")
	tests := []struct {
		name            string
		path            string
		env             checks.Env
		passed, errored bool
	}{
		{"a file under the work directory exists", "out/report.md", checks.Env{Workdir: dir}, true, false},
		{"a missing file fails", "out/other.md", checks.Env{Workdir: dir}, false, false},
		{"a workspace document exists", "notes.md", checks.Env{Document: docs(map[string]string{"notes.md": ""})}, true, false},
		{"a missing workspace document fails", "x.md", checks.Env{Document: docs(nil)}, false, false},
		{"a path climbing out is errored", "../x", checks.Env{Workdir: dir}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runOne(t, spec.CheckSpec{Type: spec.CheckDocumentExists, Path: tt.path}, tt.env)
			if r.Passed != tt.passed || r.Errored != tt.errored {
				t.Fatalf("result = %+v", r)
			}
		})
	}
}

func TestPRDAllPass(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		passed   bool
		contains []string
	}{
		{"all stories passing pass", `{"userStories":[{"id":"US-1","title":"Login","passes":true},{"id":"US-2","passes":true}]}`, true, []string{"All 2 stories"}},
		{"a stories list is accepted", `{"stories":[{"id":1,"title":"a","passes":true}]}`, true, nil},
		{"a top-level array is accepted", `[{"id":"A","passes":true}]`, true, nil},
		{"a partial PRD fails naming the failing stories", `{"userStories":[{"id":"US-1","title":"Login","passes":true},{"id":"US-2","title":"Logout","passes":false},{"title":"Untitled id","passes":"true"}]}`, false,
			[]string{"2 of 3", "US-2 (Logout)", "Untitled id"}},
		{"malformed JSON fails with the parse error", `{"userStories":[{"id":"US-1",}`, false, []string{"invalid JSON"}},
		{"no stories fails", `{"userStories":[]}`, false, []string{"no stories"}},
		{"a document without a stories list fails", `{"name":"x"}`, false, []string{"userStories"}},
		{"an empty file fails", ``, false, []string{"empty"}},
		{"stories that are not objects fail", `[1,2]`, false, []string{"story 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "prd.json", tt.content)
			for _, env := range []checks.Env{{Workdir: dir}, {Document: docs(map[string]string{"prd.json": tt.content})}} {
				r := runOne(t, spec.CheckSpec{Type: spec.CheckPRDAllPass}, env)
				if r.Passed != tt.passed || r.Errored {
					t.Fatalf("result = %+v", r)
				}
				for _, s := range tt.contains {
					if !strings.Contains(r.Message, s) {
						t.Errorf("message %q does not contain %q", r.Message, s)
					}
				}
			}
		})
	}
	t.Run("a missing prd.json fails", func(t *testing.T) {
		r := runOne(t, spec.CheckSpec{Type: spec.CheckPRDAllPass, Path: "plan/prd.json"}, checks.Env{Workdir: t.TempDir()})
		if r.Passed || r.Errored || !strings.Contains(r.Message, "plan/prd.json") {
			t.Fatalf("result = %+v", r)
		}
	})
}

func TestTasksAllDone(t *testing.T) {
	tasks := func(total, done int, err error) func(context.Context) (int, int, error) {
		return func(context.Context) (int, int, error) { return total, done, err }
	}
	tests := []struct {
		name            string
		env             checks.Env
		passed, errored bool
	}{
		{"all done passes", checks.Env{Tasks: tasks(3, 3, nil)}, true, false},
		{"some open fails", checks.Env{Tasks: tasks(3, 1, nil)}, false, false},
		{"no tasks fails", checks.Env{Tasks: tasks(0, 0, nil)}, false, false},
		{"a failing store is errored", checks.Env{Tasks: tasks(0, 0, errors.New("db down"))}, false, true},
		{"no task source is errored", checks.Env{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runOne(t, spec.CheckSpec{Type: spec.CheckTasksAllDone}, tt.env)
			if r.Passed != tt.passed || r.Errored != tt.errored {
				t.Fatalf("result = %+v", r)
			}
		})
	}
}

func TestTail(t *testing.T) {
	tl := checks.NewTail(5)
	for _, s := range []string{"ab", "cdefgh", "ij"} {
		tl.Write([]byte(s))
	}
	if got := string(tl.Bytes()); got != "fghij" {
		t.Fatalf("kept %q", got)
	}
	if tl.Written() != 10 {
		t.Fatalf("written %d", tl.Written())
	}
	tl.Write([]byte("0123456789"))
	if got := string(tl.Bytes()); got != "56789" {
		t.Fatalf("kept %q", got)
	}
}
