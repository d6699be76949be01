package handlers

import (
	"net/http"
	"strings"
	"testing"
)

func TestRunTags(t *testing.T) {
	ts := newTestServer(t, nil)
	alice, bob := ts.user(t, "alice@example.com"), ts.user(t, "bob@example.com")
	create := func(u *testUser, tags any) string {
		t.Helper()
		var out struct {
			RunID string `json:"run_id"`
		}
		ts.expect(t, u, "POST", "/api/runs", map[string]any{"objective": "tagged", "executor": "script",
			"script": script(doneStep("done")), "tags": tags}, http.StatusCreated, &out)
		return out.RunID
	}

	t.Run("tags are normalised, stored and returned", func(t *testing.T) {
		id := create(alice, []string{" Docs ", "after:v2", "docs"})
		var run RunJSON
		ts.expect(t, alice, "GET", "/api/runs/"+id, nil, http.StatusOK, &run)
		if strings.Join(run.Tags, ",") != "docs,after:v2" {
			t.Fatalf("tags = %q, want [docs after:v2]", run.Tags)
		}
	})

	t.Run("a run without tags has an empty list", func(t *testing.T) {
		id := create(alice, nil)
		var raw map[string]any
		ts.expect(t, alice, "GET", "/api/runs/"+id, nil, http.StatusOK, &raw)
		if tags, ok := raw["tags"].([]any); !ok || len(tags) != 0 {
			t.Fatalf("tags = %#v, want []", raw["tags"])
		}
	})

	t.Run("bad tags are refused with the field", func(t *testing.T) {
		for _, c := range []struct {
			tags  any
			field string
		}{
			{[]string{""}, "tags[0]"},
			{[]string{"ok", "has space"}, "tags[1]"},
			{[]string{strings.Repeat("x", 33)}, "tags[0]"},
			{[]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}, "tags"},
			{[]string{"<script>"}, "tags[0]"},
		} {
			ts.expectError(t, alice, "POST", "/api/runs", map[string]any{"objective": "x", "executor": "script",
				"script": script(doneStep("d")), "tags": c.tags}, http.StatusBadRequest, "invalid", c.field)
		}
		ts.expectError(t, alice, "POST", "/api/runs", `{"objective":"x","executor":"script","tags":"docs"}`,
			http.StatusBadRequest, "invalid", "")
	})

	t.Run("the run list filters by tag, only the caller's runs", func(t *testing.T) {
		a1 := create(alice, []string{"class-a"})
		create(alice, []string{"class-b"})
		create(bob, []string{"class-a"})
		var list RunList
		ts.expect(t, alice, "GET", "/api/runs?tag=CLASS-A", nil, http.StatusOK, &list)
		if len(list.Runs) != 1 || list.Runs[0].ID != a1 {
			t.Fatalf("tag filter returned %d runs, want only %s", len(list.Runs), a1)
		}
		ts.expectError(t, alice, "GET", "/api/runs?tag=no%20spaces", nil, http.StatusBadRequest, "invalid", "tag")
	})

	t.Run("the composer sets tags and the run list page filters by them", func(t *testing.T) {
		ps := newPageServer(t)
		pc := ps.signedIn(t, "carol@example.com")
		form := composeForm("composer tagged", doneStep("done"))
		form.Set("tags", "UI, nightly")
		id := pc.compose(t, form)
		carol := ps.userID(t, "carol@example.com")
		r, err := ps.Store.FindRun(ps.ctx, carol.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := runConfigOf(r)
		if err != nil || strings.Join(cfg.Tags, ",") != "ui,nightly" {
			t.Fatalf("composer tags = %v (%v), want [ui nightly]", cfg.Tags, err)
		}
		pc.compose(t, composeForm("untagged", doneStep("done")))
		resp, body := pc.get("/?tag=nightly")
		expectStatus(t, resp, body, http.StatusOK, "")
		expectContains(t, body, "composer tagged", `id="tag-filter"`)
		expectLacks(t, body, "untagged")

		pc.get("/runs/new")
		form = composeForm("bad tags", doneStep("done"))
		form.Set("tags", "fine, not fine")
		resp, body = pc.post("/runs", form)
		expectStatus(t, resp, body, http.StatusBadRequest, "")
		expectContains(t, body, `id="tags-error"`)
	})
}
