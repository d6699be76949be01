package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheDomainDependsOnNoStore keeps the layering of the code: the
// vocabulary (engine/spec) is standard library only; the engine, its
// executors and checks, the handlers and the views never reach a store or
// a database driver. Stores are opened and bound to the engine in db/bind
// (bind.Open), by cmd/homework.
func TestTheDomainDependsOnNoStore(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	forbidden := []string{"homework/db", "modernc.org/sqlite", "github.com/jackc/pgx", "github.com/riverqueue/river/riverdriver/riversqlite", "github.com/riverqueue/river/riverdriver/riverpgxv5"}
	for _, pkg := range []string{"homework/engine", "homework/engine/llm", "homework/engine/agentcmd", "homework/engine/scripted",
		"homework/engine/checks", "homework/engine/proc", "homework/views", "homework/handlers"} {
		for _, dep := range deps(t, pkg) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
	for _, dep := range deps(t, "homework/engine/spec") {
		if strings.Contains(strings.SplitN(dep, "/", 2)[0], ".") || (strings.HasPrefix(dep, "homework/") && dep != "homework/engine/spec") {
			t.Errorf("engine/spec depends on %s; it may use only the standard library", dep)
		}
	}
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}
