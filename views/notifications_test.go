package views

import (
	"testing"
	"time"

	"homework/engine/spec"
)

func TestGroupNotificationsKeepsEachRunOnceNewestFirst(t *testing.T) {
	read := time.Unix(1, 0)
	items := []*spec.Notification{
		{ID: 5, RunID: "b"},
		{ID: 4, RunID: "a", ReadAt: read},
		{ID: 3, RunID: "b", ReadAt: read},
		{ID: 2, RunID: ""},
		{ID: 1, RunID: "a"},
	}
	groups := GroupNotifications(items)
	type want struct {
		run    string
		ids    []int64
		unread int
	}
	wants := []want{{"b", []int64{5, 3}, 1}, {"a", []int64{4, 1}, 1}, {"", []int64{2}, 1}}
	if len(groups) != len(wants) {
		t.Fatalf("%d groups, want %d", len(groups), len(wants))
	}
	for i, w := range wants {
		g := groups[i]
		if g.RunID != w.run || g.Unread != w.unread || len(g.Items) != len(w.ids) {
			t.Fatalf("group %d: run %q, %d items, %d unread; want %+v", i, g.RunID, len(g.Items), g.Unread, w)
		}
		for j, id := range w.ids {
			if g.Items[j].ID != id {
				t.Fatalf("group %d item %d is %d, want %d", i, j, g.Items[j].ID, id)
			}
		}
	}
	if h := groups[2].heading(); h != "Your account" {
		t.Fatalf("heading of the account's group: %q", h)
	}
}

func TestRunListFilterCount(t *testing.T) {
	for _, c := range []struct {
		f    RunListFilter
		want int
	}{
		{RunListFilter{}, 0},
		{RunListFilter{Query: "words"}, 0},
		{RunListFilter{Status: "running", Tag: "nightly", Sort: "cost"}, 3},
		{RunListFilter{Executor: "llm", StopType: "max_iterations", From: "2026-01-01", To: "2026-02-01"}, 4},
	} {
		if got := c.f.Count(); got != c.want {
			t.Errorf("%+v: Count %d, want %d", c.f, got, c.want)
		}
	}
}
