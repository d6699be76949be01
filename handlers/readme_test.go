package handlers

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// apiTableRow is a row of the README's API table: "| `METHOD /path?query` | …".
var apiTableRow = regexp.MustCompile("^\\| `([A-Z]+) (/[^` ?]*)[^`]*` \\|")

// TestReadmeAPITableMatchesTheRoutes: the API table in README.md lists each
// route once, every route it lists is one the server serves with that
// method, and every route under /api is listed.
func TestReadmeAPITableMatchesTheRoutes(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(b)
	i := strings.Index(section, "### The API in brief")
	if i < 0 {
		t.Fatal(`README.md has no "### The API in brief" section`)
	}
	section = section[i:]
	if j := strings.Index(section[1:], "\n#"); j >= 0 {
		section = section[:j+1]
	}
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		m := apiTableRow.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("README API table row is not \"| `METHOD /path` | what |\": %s", line)
			continue
		}
		if strings.Contains(line, " · ") {
			t.Errorf("README API table row lists more than one route; give each its own row: %s", line)
		}
		listed = append(listed, m[1]+" "+m[2])
	}
	if len(listed) < 10 {
		t.Fatalf("found only %d routes in the README's API table: %v", len(listed), listed)
	}

	ts := newTestServer(t, nil)
	served := map[string]bool{}
	var api []string
	for _, r := range ts.Server.app.GetRoutes(true) {
		if r.Method == fiber.MethodHead || r.Method == "USE" {
			continue
		}
		key := r.Method + " " + readmePath(r.Path)
		served[key] = true
		if strings.HasPrefix(r.Path, "/api/") {
			api = append(api, key)
		}
	}
	seen := map[string]bool{}
	for _, l := range listed {
		if seen[l] {
			t.Errorf("README lists %s more than once", l)
		}
		seen[l] = true
		if !served[l] {
			t.Errorf("README lists %s, which the server does not serve", l)
		}
	}
	slices.Sort(api)
	for _, a := range slices.Compact(api) {
		if !seen[a] {
			t.Errorf("the server serves %s, which the README's API table does not list", a)
		}
	}
}

// readmePath writes a Fiber route the README's way: "/runs/:id" is
// "/runs/{id}".
func readmePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + strings.TrimPrefix(s, ":") + "}"
		}
	}
	return strings.Join(segs, "/")
}
