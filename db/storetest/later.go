package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"homework/engine/spec"
)

// runLater runs the suite's later parts (Run runs them).
func runLater(t *testing.T, open func(t *testing.T) spec.Store) {
	s := laterSuite{open: open}
	t.Run("the run list filters by tag, status, stop reason and words, and sorts by cost", s.runList)
	t.Run("the report's rows carry each run's figures, tags and escalation", s.statsRows)
	t.Run("transcripts keep their lines under the cap and page with their iterations", s.transcripts)
	t.Run("raw agent bytes (NUL, controls, invalid UTF-8) are stored, not refused", s.rawBytes)
	t.Run("a run's notifications resolve and are read", s.notificationsResolve)
	t.Run("only the current attempt renews its lease", s.attemptLease)
	t.Run("a read transaction sees one snapshot, whatever is committed meanwhile", s.readSnapshot)
	t.Run("model calls keep their token split and their cost's source", s.llmCalls)
	t.Run("a forecast reads finished iterations' usage; the report reads budgets and forecast stops", s.usage)
	t.Run("webhook endpoints keep their events and deliveries, each user only theirs", s.webhooks)
	t.Run("a run's event history pages back by seq, filtered by type", s.eventHistory)
	t.Run("run updates after a read keep the indexed lists right", s.updatesAfterRead)
}

type laterSuite struct {
	open func(t *testing.T) spec.Store
}

func (s laterSuite) fixture(t *testing.T) (*fixture, spec.Store) {
	t.Helper()
	ls := s.open(t)
	return &fixture{t: t, ctx: context.Background(), s: ls}, ls
}

func ids(runs []*spec.Run) string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return strings.Join(out, " ")
}

func (s laterSuite) runList(t *testing.T) {
	f, ls := s.fixture(t)
	u, other := f.user("list@example.com"), f.user("other@example.com")
	for i, cost := range []float64{0.5, 2, 0.1} {
		r := f.run(u.ID, fmt.Sprintf("r%d", i))
		r.Metrics.AddCall("m", 10, 10, cost, true)
		if i == 1 {
			r.Objective = "Compare the SQLite drivers"
			r.Status, r.StopReason = spec.StatusStopped, &spec.StopReason{Type: spec.StopNoProgress}
		}
		f.tx(func(tx spec.Tx) error {
			if err := tx.UpdateRun(f.ctx, r); err != nil {
				return err
			}
			if i != 2 {
				return tx.InsertRunTags(f.ctx, r.ID, u.ID, []string{"nightly"})
			}
			return nil
		})
	}
	o := f.run(other.ID, "theirs")
	f.tx(func(tx spec.Tx) error { return tx.InsertRunTags(f.ctx, o.ID, other.ID, []string{"nightly"}) })

	for _, c := range []struct {
		name string
		f    spec.RunFilter
		want string
	}{
		{"tag", spec.RunFilter{Tag: "nightly"}, "r1 r0"},
		{"status", spec.RunFilter{Status: spec.StatusStopped}, "r1"},
		{"stop reason", spec.RunFilter{StopType: spec.StopNoProgress}, "r1"},
		{"words", spec.RunFilter{Query: "sqlite drivers"}, "r1"},
		{"most expensive first", spec.RunFilter{Sort: spec.SortCostDesc}, "r1 r0 r2"},
		{"cheapest first", spec.RunFilter{Sort: spec.SortCostAsc}, "r2 r0 r1"},
		{"oldest first", spec.RunFilter{Sort: spec.SortOldest}, "r0 r1 r2"},
	} {
		page, err := ls.ListRuns(f.ctx, u.ID, c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ids(page.Runs); got != c.want {
			t.Errorf("%s: runs %q, want %q", c.name, got, c.want)
		}
	}
	var seen []string
	cursor := ""
	for range 5 {
		page, err := ls.ListRuns(f.ctx, u.ID, spec.RunFilter{Sort: spec.SortCostDesc, Limit: 1, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ids(page.Runs))
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if strings.Join(seen, " ") != "r1 r0 r2" {
		t.Errorf("cost pages = %v, want r1 r0 r2, each once", seen)
	}
	_, err := ls.ListRuns(f.ctx, u.ID, spec.RunFilter{Sort: "sideways"})
	wantCode(t, "an unknown sort", err, spec.EINVALID)
	tags, err := ls.ListUserTags(f.ctx, u.ID)
	if err != nil || len(tags) != 1 || tags[0].Tag != "nightly" || tags[0].Runs != 2 {
		t.Errorf("tags = %+v, %v; want nightly on 2 runs (another user's not counted)", tags, err)
	}
}

func (s laterSuite) statsRows(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("stats@example.com")
	done := f.run(u.ID, "done")
	done.Status = spec.StatusCompleted
	done.StopReason = &spec.StopReason{Type: spec.StopCompleted}
	done.Metrics = spec.Metrics{Iterations: 3, RunningMS: 900, ToolCallsTotal: 4, FalseCompletionsBlocked: 1}
	done.Metrics.AddCall("m", 100, 50, 0.75, true)
	waited := f.run(u.ID, "waited")
	f.tx(func(tx spec.Tx) error {
		if err := tx.UpdateRun(f.ctx, done); err != nil {
			return err
		}
		if err := tx.InsertRunTags(f.ctx, done.ID, u.ID, []string{"b", "a"}); err != nil {
			return err
		}
		_, err := tx.AppendEvent(f.ctx, waited.ID, spec.EventRunWaitingOnUser, map[string]any{"reason": "needs_input"})
		return err
	})
	rows, err := ls.StatsRows(f.ctx, u.ID, spec.StatsFilter{Detail: true})
	if err != nil || len(rows) != 2 {
		t.Fatalf("rows = %+v, %v", rows, err)
	}
	d, w := rows[0], rows[1]
	if d.RunID != "done" || d.Status != spec.StatusCompleted || d.StopReason != spec.StopCompleted || d.Iterations != 3 ||
		d.RunningMS != 900 || d.CostUSD != 0.75 || d.TokensTotal != 150 || d.ToolCalls != 4 || d.FalseCompletionsBlocked != 1 ||
		strings.Join(d.Tags, ",") != "a,b" || d.Escalated || d.Objective != "objective done" {
		t.Errorf("completed run's row = %+v", d)
	}
	if w.RunID != "waited" || !w.Escalated || len(w.Tags) != 0 {
		t.Errorf("waiting run's row = %+v", w)
	}
	tagged, err := ls.StatsRows(f.ctx, u.ID, spec.StatsFilter{Tag: "a"})
	if err != nil || len(tagged) != 1 || tagged[0].RunID != "done" {
		t.Errorf("rows tagged a = %+v, %v", tagged, err)
	}
}

func (s laterSuite) transcripts(t *testing.T) {
	f, ls := s.fixture(t)
	u, other := f.user("tr@example.com"), f.user("tr2@example.com")
	r := f.run(u.ID, "tr")
	f.tx(func(tx spec.Tx) error {
		for i := 1; i <= 3; i++ {
			if err := tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: r.ID, Iteration: i, Attempt: 1, Status: spec.IterSucceeded,
				StartedAt: tx.Now(), EndedAt: tx.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	var info *spec.TranscriptInfo
	f.tx(func(tx spec.Tx) error {
		lines := []*spec.TranscriptLine{{Kind: spec.TranscriptAssistant, Text: "hello"}, {Kind: spec.TranscriptToolCall, Name: "search", Text: "needle"}}
		kept, in, err := tx.AppendTranscript(f.ctx, r.ID, 2, 20, lines, 0)
		if err != nil {
			return err
		}
		if len(kept) != 2 || kept[0].Seq != 1 || kept[1].Seq != 2 {
			t.Errorf("kept = %+v", kept)
		}
		if in.Lines != 2 || in.Bytes != int64(len("hello")+len("needle")) || in.CapBytes != 20 || in.DroppedLines != 0 {
			t.Errorf("info after the first append = %+v", in)
		}
		// Over the 20-byte cap: cut at the cap, and later lines dropped.
		_, info, err = tx.AppendTranscript(f.ctx, r.ID, 2, 20, []*spec.TranscriptLine{{Kind: spec.TranscriptOutput, Text: "0123456789abcdef"}, {Kind: spec.TranscriptOutput, Text: "gone"}}, 0)
		if err != nil {
			return err
		}
		// An iteration's first append over the cap is cut the same way.
		kept, in, err = tx.AppendTranscript(f.ctx, r.ID, 1, 10, []*spec.TranscriptLine{{Kind: spec.TranscriptOutput, Text: "0123456789abcdef"}, {Kind: spec.TranscriptOutput, Text: "gone"}}, 0)
		if err != nil {
			return err
		}
		if len(kept) != 1 || kept[0].Seq != 1 || kept[0].Text != "0123456789" || in.Lines != 1 || in.Bytes != 10 ||
			in.DroppedBytes != int64(len("abcdef")+len("gone")) || in.DroppedLines != 1 {
			t.Errorf("first append over the cap: kept %+v, info %+v", kept, in)
		}
		return nil
	})
	if info.Bytes != 20 || info.Lines != 3 || info.DroppedBytes != int64(len("9abcdef")+len("gone")) || info.DroppedLines != 1 {
		t.Errorf("info after the cap = %+v", info)
	}
	tr, err := ls.FindTranscript(f.ctx, u.ID, r.ID, 2, 0, 2)
	if err != nil || len(tr.Lines) != 2 || !tr.More || tr.Lines[1].Name != "search" || tr.Info.DroppedLines != 1 {
		t.Fatalf("first page = %+v, %v", tr, err)
	}
	tr, err = ls.FindTranscript(f.ctx, u.ID, r.ID, 2, tr.Lines[1].Seq, 0)
	if err != nil || len(tr.Lines) != 1 || tr.Lines[0].Text != "012345678" || tr.More {
		t.Errorf("rest = %+v, %v", tr, err)
	}
	_, err = ls.FindTranscript(f.ctx, other.ID, r.ID, 2, 0, 0)
	wantCode(t, "another user's transcript", err, spec.ENOTFOUND)
	_, err = ls.FindTranscript(f.ctx, u.ID, r.ID, 9, 0, 0)
	wantCode(t, "the transcript of an iteration that never began", err, spec.ENOTFOUND)
	if tr, err := ls.FindTranscript(f.ctx, u.ID, r.ID, 3, 0, 0); err != nil || len(tr.Lines) != 0 {
		t.Errorf("an iteration that began and wrote nothing: %+v, %v", tr, err)
	}
	hits, err := ls.SearchTranscripts(f.ctx, u.ID, r.ID, "NEEDLE", 10)
	if err != nil || len(hits) != 1 || hits[0].Iteration != 2 {
		t.Errorf("search = %+v, %v", hits, err)
	}
	page, err := ls.PageIterations(f.ctx, u.ID, r.ID, "", 2, true)
	if err != nil || len(page.Iterations) != 2 || page.Iterations[0].Iteration != 3 || page.NextCursor == "" || page.Transcripts[2] == nil || page.Transcripts[3] != nil {
		t.Fatalf("newest page = %+v, %v", page, err)
	}
	page, err = ls.PageIterations(f.ctx, u.ID, r.ID, page.NextCursor, 2, true)
	if err != nil || len(page.Iterations) != 1 || page.Iterations[0].Iteration != 1 || page.NextCursor != "" {
		t.Errorf("next page = %+v, %v", page, err)
	}
	_, err = ls.PageIterations(f.ctx, u.ID, r.ID, "bogus", 2, false)
	wantCode(t, "a bad iteration cursor", err, spec.EINVALID)
}

// rawBytes: an agent's output holds any bytes — a NUL, terminal controls,
// invalid UTF-8 — and every store keeps what it can of them rather than
// failing the write (PostgreSQL's text and JSON refuse NUL).
func (s laterSuite) rawBytes(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("raw@example.com")
	r := f.run(u.ID, "raw")
	raw := "before\x00after \x1b[31mred\x1b[0m \xff\xfe bell\a"
	f.tx(func(tx spec.Tx) error {
		if err := tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: r.ID, Iteration: 1, Attempt: 1, Status: spec.IterRunning, StartedAt: tx.Now()}); err != nil {
			return err
		}
		if _, _, err := tx.AppendTranscript(f.ctx, r.ID, 1, 1<<20, []*spec.TranscriptLine{{Kind: spec.TranscriptOutput, Name: "n\x00", Text: raw}}, 0); err != nil {
			return err
		}
		_, err := tx.AppendEvent(f.ctx, r.ID, spec.EventAgentOutput, spec.AgentOutputData{Iteration: 1, Text: raw})
		return err
	})
	tr, err := ls.FindTranscript(f.ctx, u.ID, r.ID, 1, 0, 0)
	if err != nil || len(tr.Lines) != 1 {
		t.Fatalf("transcript = %+v, %v", tr, err)
	}
	got := tr.Lines[0].Text
	for _, keep := range []string{"before", "after", "\x1b[31mred", "bell\a"} {
		if !strings.Contains(got, keep) {
			t.Errorf("stored text %q lost %q", got, keep)
		}
	}
	evs, err := ls.ListRunEvents(f.ctx, u.ID, r.ID, 0, 10)
	if err != nil || len(evs) == 0 {
		t.Fatalf("events = %v, %v", evs, err)
	}
}

func (s laterSuite) notificationsResolve(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("nr@example.com")
	r := f.run(u.ID, "nr")
	f.tx(func(tx spec.Tx) error {
		for _, kind := range []string{"run_waiting_on_user", "run_completed"} {
			if err := tx.InsertNotification(f.ctx, &spec.Notification{UserID: u.ID, RunID: r.ID, Kind: kind, Title: kind}); err != nil {
				return err
			}
		}
		return nil
	})
	f.tx(func(tx spec.Tx) error { return tx.ResolveRunNotifications(f.ctx, r.ID, "run_waiting_on_user") })
	if n, err := ls.CountUnread(f.ctx, u.ID); err != nil || n != 1 {
		t.Errorf("unread after resolving the waiting one = %d, %v; want 1", n, err)
	}
	if n, err := ls.MarkRunNotificationsRead(f.ctx, u.ID, r.ID); err != nil || n != 1 {
		t.Errorf("marked read = %d, %v; want 1", n, err)
	}
	if n, err := ls.CountUnread(f.ctx, u.ID); err != nil || n != 0 {
		t.Errorf("unread at the end = %d, %v", n, err)
	}
}

func (s laterSuite) attemptLease(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("lease@example.com")
	r := f.run(u.ID, "lease")
	r.Status, r.Iteration, r.Attempt, r.LeaseOwner, r.LeaseUntil = spec.StatusRunning, 2, 1, "me", time.Now().Add(time.Minute)
	f.tx(func(tx spec.Tx) error { return tx.UpdateRun(f.ctx, r) })
	until := time.Now().Add(time.Hour)
	if ok, err := ls.RenewAttemptLease(f.ctx, r.ID, "me", 2, 1, until); err != nil || !ok {
		t.Errorf("the current attempt's renewal = %v, %v", ok, err)
	}
	for _, c := range []struct {
		owner              string
		iteration, attempt int
	}{{"me", 1, 1}, {"me", 2, 2}, {"someone else", 2, 1}} {
		if ok, err := ls.RenewAttemptLease(f.ctx, r.ID, c.owner, c.iteration, c.attempt, until); err != nil || ok {
			t.Errorf("renewal by %+v = %v, %v; want refused", c, ok, err)
		}
	}
}

// readSnapshot commits a change to a run (its status, a new iteration with
// a transcript, an event, a task, a document) after a read transaction's
// first read, and checks that every later read of the transaction still
// sees the run as it was, while reads outside it see the change.
func (s laterSuite) readSnapshot(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("snap@example.com")
	r := f.run(u.ID, "snap")
	f.tx(func(tx spec.Tx) error {
		if _, err := tx.AppendEvent(f.ctx, r.ID, "run_created", nil); err != nil {
			return err
		}
		return tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: r.ID, Iteration: 1, Attempt: 1, Status: spec.IterSucceeded,
			StartedAt: tx.Now(), EndedAt: tx.Now()})
	})
	change := func() {
		f.tx(func(tx spec.Tx) error {
			cur, err := tx.FindRun(f.ctx, r.ID)
			if err != nil {
				return err
			}
			cur.Status = spec.StatusRunning
			if err := tx.UpdateRun(f.ctx, cur); err != nil {
				return err
			}
			if err := tx.UpsertIteration(f.ctx, &spec.Iteration{RunID: r.ID, Iteration: 2, Attempt: 1, Status: spec.IterRunning,
				StartedAt: tx.Now()}); err != nil {
				return err
			}
			if _, _, err := tx.AppendTranscript(f.ctx, r.ID, 2, 1<<20, []*spec.TranscriptLine{{Kind: spec.TranscriptOutput, Text: "new"}}, 0); err != nil {
				return err
			}
			if _, err := tx.AppendEvent(f.ctx, r.ID, "iteration_started", map[string]int{"iteration": 2}); err != nil {
				return err
			}
			if err := tx.InsertTask(f.ctx, &spec.Task{ID: "snap-task", RunID: r.ID, Title: "new task", Status: "todo"}); err != nil {
				return err
			}
			_, err = tx.PutDocument(f.ctx, &spec.Document{ID: "snap-doc", RunID: r.ID, UserID: u.ID, Path: "new.md", Kind: spec.DocNote, Content: "new"})
			return err
		})
	}
	type view struct {
		status                string
		iterations, pageItems int
		transcriptLines       int
		events                int
		lastSeq, lastUserID   int64
		queued, running       int
		listed                string
		docs, tasks           int
	}
	read := func(rs spec.ReadStore, between func()) (view, error) {
		var v view
		run, err := rs.FindRun(f.ctx, u.ID, r.ID)
		if err != nil {
			return v, err
		}
		v.status = run.Status
		if between != nil {
			between()
		}
		its, err := rs.ListIterations(f.ctx, u.ID, r.ID)
		if err != nil {
			return v, err
		}
		v.iterations = len(its)
		page, err := rs.PageIterations(f.ctx, u.ID, r.ID, "", 10, true)
		if err != nil {
			return v, err
		}
		v.pageItems = len(page.Iterations)
		tr, err := rs.FindTranscript(f.ctx, u.ID, r.ID, 2, 0, 0)
		switch {
		case spec.ErrorCode(err) == spec.ENOTFOUND: // iteration 2 has not begun in this snapshot
		case err != nil:
			return v, err
		default:
			v.transcriptLines = len(tr.Lines)
		}
		evs, err := rs.ListRunEvents(f.ctx, u.ID, r.ID, 0, 0)
		if err != nil {
			return v, err
		}
		v.events = len(evs)
		if v.lastSeq, err = rs.LastSeq(f.ctx, r.ID); err != nil {
			return v, err
		}
		if v.lastUserID, err = rs.LastUserEventID(f.ctx, u.ID); err != nil {
			return v, err
		}
		counts, err := rs.CountRunsByStatus(f.ctx, u.ID)
		if err != nil {
			return v, err
		}
		v.queued, v.running = counts[spec.StatusQueued], counts[spec.StatusRunning]
		list, err := rs.ListRuns(f.ctx, u.ID, spec.RunFilter{})
		if err != nil {
			return v, err
		}
		for _, lr := range list.Runs {
			v.listed += lr.ID + ":" + lr.Status
		}
		docs, err := rs.ListRunDocuments(f.ctx, u.ID, r.ID)
		if err != nil {
			return v, err
		}
		v.docs = len(docs)
		tasks, err := rs.ListTasks(f.ctx, u.ID, r.ID)
		if err != nil {
			return v, err
		}
		v.tasks = len(tasks)
		return v, nil
	}

	var inTx view
	committed := false
	err := ls.ReadTx(f.ctx, func(rs spec.ReadStore) error {
		var err error
		inTx, err = read(rs, func() {
			change()
			// The change is committed: a read outside the transaction sees it.
			now, err := ls.FindRun(f.ctx, u.ID, r.ID)
			committed = err == nil && now.Status == spec.StatusRunning
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !committed {
		t.Fatal("the change committed during the read transaction is not visible outside it")
	}
	want := view{status: spec.StatusQueued, iterations: 1, pageItems: 1, events: 1, lastSeq: 1, queued: 1, listed: "snap:queued"}
	want.lastUserID = inTx.lastUserID // an id; checked against the later read below
	if inTx != want {
		t.Errorf("reads in the transaction after the commit saw %+v, want the state before it %+v", inTx, want)
	}
	var after view
	if err := ls.ReadTx(f.ctx, func(rs spec.ReadStore) error {
		after, err = read(rs, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if after.status != spec.StatusRunning || after.iterations != 2 || after.pageItems != 2 || after.transcriptLines != 1 || after.events != 2 ||
		after.lastSeq != 2 || after.lastUserID <= inTx.lastUserID || after.running != 1 || after.listed != "snap:running" || after.docs != 1 || after.tasks != 1 {
		t.Errorf("a later read transaction saw %+v, want the change", after)
	}
	boom := fmt.Errorf("boom")
	if err := ls.ReadTx(f.ctx, func(spec.ReadStore) error { return boom }); err != boom {
		t.Errorf("ReadTx returned %v, want fn's error", err)
	}
}

// updatesAfterRead: UpdateRun sets a run's indexed columns (status, cost,
// creation time, parent) only when they changed since the transaction read
// the run; the lists read through those indexes still see every change,
// back and forth within one transaction and across them.
func (s laterSuite) updatesAfterRead(t *testing.T) {
	f, ls := s.fixture(t)
	u := f.user("updates@example.com")
	a, b := f.run(u.ID, "a"), f.run(u.ID, "b")
	list := func(filter spec.RunFilter) string {
		t.Helper()
		page, err := ls.ListRuns(f.ctx, u.ID, filter)
		if err != nil {
			t.Fatal(err)
		}
		return ids(page.Runs)
	}
	// One transaction: a goes running, then stopped with a cost, then
	// running again; b goes running and back to queued (what it was read
	// as), with a new iteration.
	f.tx(func(tx spec.Tx) error {
		run, err := tx.FindRun(f.ctx, a.ID)
		if err != nil {
			return err
		}
		run.Status = spec.StatusRunning
		if err := tx.UpdateRun(f.ctx, run); err != nil {
			return err
		}
		run.Status = spec.StatusStopped
		run.Metrics.AddCall("m", 10, 10, 3, true)
		if err := tx.UpdateRun(f.ctx, run); err != nil {
			return err
		}
		run.Status = spec.StatusRunning
		if err := tx.UpdateRun(f.ctx, run); err != nil {
			return err
		}
		other, err := tx.FindRun(f.ctx, b.ID)
		if err != nil {
			return err
		}
		other.Status = spec.StatusRunning
		if err := tx.UpdateRun(f.ctx, other); err != nil {
			return err
		}
		other.Status, other.Iteration = spec.StatusQueued, 4
		return tx.UpdateRun(f.ctx, other)
	})
	if got := list(spec.RunFilter{Status: spec.StatusRunning}); got != "a" {
		t.Errorf("running runs = %q, want a", got)
	}
	if got := list(spec.RunFilter{Status: spec.StatusStopped}); got != "" {
		t.Errorf("stopped runs = %q, want none", got)
	}
	if got := list(spec.RunFilter{Sort: spec.SortCostDesc}); got != "a b" {
		t.Errorf("most expensive first = %q, want a b", got)
	}
	// A later transaction changes what the earlier one left, and a run
	// updated without being read in its transaction is written whole.
	f.tx(func(tx spec.Tx) error {
		run, err := tx.FindRun(f.ctx, a.ID)
		if err != nil {
			return err
		}
		run.Status, run.Metrics = spec.StatusQueued, spec.Metrics{}
		return tx.UpdateRun(f.ctx, run)
	})
	b.Status, b.Iteration = spec.StatusStopped, 4
	b.Metrics.AddCall("m", 10, 10, 5, true)
	f.tx(func(tx spec.Tx) error { return tx.UpdateRun(f.ctx, b) })
	if got := list(spec.RunFilter{Status: spec.StatusStopped}); got != "b" {
		t.Errorf("stopped runs = %q, want b", got)
	}
	if got := list(spec.RunFilter{Status: spec.StatusQueued}); got != "a" {
		t.Errorf("queued runs = %q, want a", got)
	}
	if got := list(spec.RunFilter{Sort: spec.SortCostDesc}); got != "b a" {
		t.Errorf("most expensive first = %q, want b a", got)
	}
	got, err := f.s.FindRunByID(f.ctx, b.ID)
	if err != nil || got.Iteration != 4 || got.Status != spec.StatusStopped || got.Metrics.CostTotalUSD != 5 {
		t.Errorf("b = %+v, %v", got, err)
	}
	// Metrics written on their own after the read, then the run written
	// with the metrics it was read with (got's): those are what stays.
	f.tx(func(tx spec.Tx) error {
		run, err := tx.FindRun(f.ctx, b.ID)
		if err != nil {
			return err
		}
		run.Metrics.AddCall("m", 10, 10, 2, true)
		if err := tx.SetRunMetrics(f.ctx, run); err != nil {
			return err
		}
		run.Metrics = got.Metrics
		return tx.UpdateRun(f.ctx, run)
	})
	if got := list(spec.RunFilter{Sort: spec.SortCostDesc}); got != "b a" {
		t.Errorf("most expensive first = %q, want b a", got)
	}
	if got, err := f.s.FindRunByID(f.ctx, b.ID); err != nil || got.Metrics.CostTotalUSD != 5 {
		t.Errorf("b's cost after SetRunMetrics then UpdateRun with the metrics read = %v (%v), want 5", got.Metrics.CostTotalUSD, err)
	}
}
