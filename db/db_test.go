package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"homework/engine/spec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func openTest(t testing.TB, path string, opts ...func(*Options)) *DB {
	t.Helper()
	o := Options{Path: path}
	for _, f := range opts {
		f(&o)
	}
	d, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newRun(t testing.TB, d *DB, userID int64, id string) *spec.Run {
	t.Helper()
	r := &spec.Run{ID: id, UserID: userID, Objective: "obj " + id, Mode: "auto", Executor: "script", Config: json.RawMessage(`{}`), Status: spec.StatusQueued}
	if err := d.WriteTx(context.Background(), func(tx spec.Tx) error { return tx.InsertRun(context.Background(), r) }); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMigrationsRunTwiceAndDataSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	d, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	u, err := d.CreateUser(ctx, "a@example.com", "hash", true)
	if err != nil {
		t.Fatal(err)
	}
	newRun(t, d, u.ID, "r1")
	d.Close()

	for i := 0; i < 2; i++ {
		d, err = Open(ctx, Options{Path: path})
		if err != nil {
			t.Fatalf("reopen %d: %v", i, err)
		}
		var n int
		d.Reader().QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n)
		files, _ := migrationFS.ReadDir("migrations")
		if n != len(files) {
			t.Fatalf("schema_migrations has %d rows, want one per migration file (%d)", n, len(files))
		}
		got, err := d.FindRun(ctx, u.ID, "r1")
		if err != nil || got.Objective != "obj r1" {
			t.Fatalf("run after restart: %v %+v", err, got)
		}
		var riverTables int
		d.Reader().QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'river_job'`).Scan(&riverTables)
		if riverTables != 1 {
			t.Fatal("river's tables are missing")
		}
		d.Close()
	}
}

func TestPragmas(t *testing.T) {
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	var mode string
	var fk, sync int
	d.Writer().QueryRow(`PRAGMA journal_mode`).Scan(&mode)
	d.Writer().QueryRow(`PRAGMA foreign_keys`).Scan(&fk)
	d.Writer().QueryRow(`PRAGMA synchronous`).Scan(&sync)
	if mode != "wal" || fk != 1 || sync != 1 {
		t.Fatalf("journal_mode=%s foreign_keys=%d synchronous=%d", mode, fk, sync)
	}
	if _, err := d.Reader().Exec(`INSERT INTO users (email, password_hash, created_at) VALUES ('x','y',1)`); err == nil {
		t.Fatal("the reader pool accepted a write")
	}
}

func TestSecondLockHolderIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	openTest(t, path, func(o *Options) { o.Lock = true })
	if _, err := Open(context.Background(), Options{Path: path, Lock: true}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second locked open: %v", err)
	}
	d := openTest(t, path) // short-lived commands open without the lock
	if _, err := d.CreateUser(context.Background(), "b@example.com", "h", false); err != nil {
		t.Fatal(err)
	}
}

func TestUsersTokensAndSessions(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"), func(o *Options) { o.Now = func() time.Time { return now } })
	u, err := d.CreateUser(ctx, "A@Example.com", "hash", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateUser(ctx, "a@example.com", "hash", false); spec.ErrorCode(err) != spec.ECONFLICT {
		t.Fatalf("duplicate email (case-insensitive): %v", err)
	}
	if got, err := d.FindUserByEmail(ctx, "a@EXAMPLE.com"); err != nil || got.ID != u.ID {
		t.Fatalf("find by email: %v", err)
	}
	if _, err := d.CreateFirstUser(ctx, "c@example.com", "h"); spec.ErrorCode(err) != spec.ECONFLICT {
		t.Fatalf("first user when users exist: %v", err)
	}
	secret, tok, err := d.CreateAPIToken(ctx, u.ID, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	var stored string
	d.Reader().QueryRow(`SELECT token_hash FROM api_tokens WHERE id = ?`, tok.ID).Scan(&stored)
	if stored == secret || stored != spec.HashToken(secret) {
		t.Fatal("the token is not stored hashed")
	}
	if got, err := d.FindUserByToken(ctx, secret); err != nil || got.ID != u.ID {
		t.Fatalf("good token: %v", err)
	}
	if _, err := d.FindUserByToken(ctx, secret+"x"); spec.ErrorCode(err) != spec.EUNAUTHORIZED {
		t.Fatalf("wrong token: %v", err)
	}
	if err := d.RevokeAPIToken(ctx, u.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.FindUserByToken(ctx, secret); spec.ErrorCode(err) != spec.EUNAUTHORIZED {
		t.Fatalf("revoked token: %v", err)
	}
	sec, sess, err := d.CreateSession(ctx, u.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if s, su, err := d.FindSession(ctx, sec); err != nil || su.ID != u.ID || s.CSRFToken != sess.CSRFToken {
		t.Fatalf("session: %v", err)
	}
	now = now.Add(2 * time.Hour)
	if _, _, err := d.FindSession(ctx, sec); spec.ErrorCode(err) != spec.EUNAUTHORIZED {
		t.Fatalf("expired session: %v", err)
	}
}

func TestStoreRoundTripsAndCrossUserReadsAreNotFound(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	a, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	b, _ := d.CreateUser(ctx, "b@example.com", "h", false)
	r := newRun(t, d, a.ID, "run-a")
	r.Status = spec.StatusStopped
	r.StopReason = &spec.StopReason{Type: "no_progress", Detail: "d", Evidence: json.RawMessage(`{"x":1}`)}
	r.Waiting = &spec.Waiting{Reason: "blocked", Questions: []string{"q"}}
	r.Metrics.AddCall("m", 10, 5, 0.5, true)
	r.Report = &spec.Report{Title: "t", Metrics: spec.ReportMetrics{Iterations: 2}}
	var doc *spec.Document
	err := d.WriteTx(ctx, func(tx spec.Tx) error {
		if err := tx.UpdateRun(ctx, r); err != nil {
			return err
		}
		if err := tx.UpsertIteration(ctx, &spec.Iteration{RunID: r.ID, Iteration: 1, Attempt: 1, Status: spec.IterSucceeded, StartedAt: tx.Now(),
			Summary: "s", Gate: json.RawMessage(`{"decision":"continue"}`), Metrics: spec.Metrics{Iterations: 1}}); err != nil {
			return err
		}
		doc = &spec.Document{RunID: r.ID, Path: "notes/sqlite drivers.md", Title: "SQLite drivers", Content: "modernc is pure Go", Tags: []string{"go"}}
		if _, err := tx.PutDocument(ctx, doc); err != nil {
			return err
		}
		if err := tx.InsertTask(ctx, &spec.Task{RunID: r.ID, Title: "compare"}); err != nil {
			return err
		}
		if err := tx.InsertInbox(ctx, &spec.InboxItem{RunID: r.ID, Kind: spec.InboxAnswer, Body: "yes"}); err != nil {
			return err
		}
		if err := tx.InsertLLMCall(ctx, &spec.LLMCall{RunID: r.ID, Iteration: 1, Role: "planner", Model: "m", PromptTokens: 10, Priced: true}); err != nil {
			return err
		}
		if err := tx.InsertNotification(ctx, &spec.Notification{UserID: a.ID, RunID: r.ID, Kind: "run_stopped", Title: "t", ActionURL: "/runs/run-a"}); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, r.ID, "run_stopped", map[string]string{"k": "v"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.FindRun(ctx, a.ID, r.ID)
	if err != nil || got.StopReason.Type != "no_progress" || string(got.StopReason.Evidence) != `{"x":1}` || got.Waiting.Questions[0] != "q" ||
		got.Metrics.ByModel["m"].CostUSD != 0.5 || got.Report == nil || got.Report.Title != "t" || got.Report.Metrics.Iterations != 2 {
		t.Fatalf("run round trip: %v %+v", err, got)
	}
	if its, err := d.ListIterations(ctx, a.ID, r.ID); err != nil || len(its) != 1 || its[0].Summary != "s" {
		t.Fatalf("iterations: %v", err)
	}
	if got, err := d.FindDocument(ctx, a.ID, doc.ID); err != nil || got.Tags[0] != "go" || got.Path != doc.Path {
		t.Fatalf("document: %v", err)
	}
	if hits, err := d.SearchDocuments(ctx, a.ID, "", "pure", 10); err != nil || len(hits) != 1 {
		t.Fatalf("search: %v %d", err, len(hits))
	}
	if hits, err := d.SearchDocuments(ctx, a.ID, "", `"unbalanced AND (`, 10); err != nil || len(hits) != 0 {
		t.Fatalf("hostile search text: %v", err)
	}
	if tasks, err := d.ListTasks(ctx, a.ID, r.ID); err != nil || len(tasks) != 1 || tasks[0].Status != spec.TaskTodo {
		t.Fatalf("tasks: %v", err)
	}
	if inbox, err := d.ListInbox(ctx, a.ID, r.ID); err != nil || len(inbox) != 1 {
		t.Fatalf("inbox: %v", err)
	}
	if calls, err := d.ListLLMCalls(ctx, a.ID, r.ID); err != nil || len(calls) != 1 {
		t.Fatalf("llm calls: %v", err)
	}
	ns, err := d.ListNotifications(ctx, a.ID, 0, 10)
	if err != nil || len(ns) != 1 {
		t.Fatalf("notifications: %v", err)
	}
	if n, _ := d.CountUnread(ctx, a.ID); n != 1 {
		t.Fatalf("unread = %d", n)
	}

	// b sees none of a's objects.
	if _, err := d.FindRun(ctx, b.ID, r.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Errorf("run: %v", err)
	}
	if _, err := d.ListRunEvents(ctx, b.ID, r.ID, 0, 10); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Errorf("events: %v", err)
	}
	if _, err := d.FindDocument(ctx, b.ID, doc.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Errorf("document: %v", err)
	}
	if _, err := d.ListRunDocuments(ctx, b.ID, r.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Errorf("documents: %v", err)
	}
	if _, err := d.ListIterations(ctx, b.ID, r.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Errorf("iterations: %v", err)
	}
	if hits, _ := d.SearchDocuments(ctx, b.ID, "", "pure", 10); len(hits) != 0 {
		t.Errorf("search leaks another user's documents")
	}
	if err := d.MarkNotificationRead(ctx, b.ID, ns[0].ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Errorf("notification: %v", err)
	}
	if evs, _ := d.ListUserEvents(ctx, b.ID, 0, 10); len(evs) != 0 {
		t.Errorf("user feed leaks events")
	}
	if err := d.MarkNotificationRead(ctx, a.ID, ns[0].ID); err != nil {
		t.Fatal(err)
	}
	if n, _ := d.CountUnread(ctx, a.ID); n != 0 {
		t.Fatalf("unread after read = %d", n)
	}
}

func TestListRunsPaginatesWithACursor(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"), func(o *Options) { o.Now = func() time.Time { now = now.Add(time.Millisecond); return now } })
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	for i := 0; i < 7; i++ {
		newRun(t, d, u.ID, string(rune('a'+i)))
	}
	var seen []string
	cursor := ""
	for {
		p, err := d.ListRuns(ctx, u.ID, spec.RunFilter{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Runs {
			seen = append(seen, r.ID)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if len(seen) != 7 || seen[0] != "g" || seen[6] != "a" {
		t.Fatalf("pages: %v", seen)
	}
	if _, err := d.ListRuns(ctx, u.ID, spec.RunFilter{Cursor: "garbage"}); spec.ErrorField(err) != "cursor" {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestConcurrentEventAppendsAreGapFreeAndPublishedInOrder(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	published := map[string][]int64{}
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"), func(o *Options) {
		o.OnEvents = func(evs []*spec.Event) {
			mu.Lock()
			for _, e := range evs {
				published[e.RunID] = append(published[e.RunID], e.Seq)
			}
			mu.Unlock()
		}
	})
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	runs := []string{"r1", "r2", "r3"}
	for _, id := range runs {
		newRun(t, d, u.ID, id)
	}
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := d.AppendEvent(ctx, runs[(g+i)%3], "tool_call", map[string]int{"g": g, "i": i}); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if _, err := d.AppendEvent(ctx, "missing", "x", nil); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("append to a missing run: %v", err)
	}
	total := 0
	for _, id := range runs {
		evs, err := d.ListRunEvents(ctx, u.ID, id, 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("run %s: seq %d at %d", id, e.Seq, i)
			}
		}
		for i, s := range published[id] {
			if s != int64(i+1) {
				t.Fatalf("run %s published out of order: %v", id, published[id][:i+1])
			}
		}
		total += len(evs)
	}
	if total != 32*50 {
		t.Fatalf("%d events", total)
	}
}

func TestARolledBackAppendLeavesNoGap(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	newRun(t, d, u.ID, "r")
	if _, err := d.AppendEvent(ctx, "r", "one", nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := d.WriteTx(ctx, func(tx spec.Tx) error {
		if _, err := tx.AppendEvent(ctx, "r", "rolled back", nil); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	e, err := d.AppendEvent(ctx, "r", "two", nil)
	if err != nil || e.Seq != 2 {
		t.Fatalf("after a rollback the next seq is %d (%v), want 2", e.Seq, err)
	}
	evs, _ := d.ListRunEvents(ctx, u.ID, "r", 0, 10)
	if len(evs) != 2 || evs[1].Type != "two" || evs[1].ID != e.ID {
		t.Fatalf("events %+v", evs)
	}
}

// TestUnavailableTellsAnOutageFromAFault: a database locked by another
// writer past the busy timeout is an outage; a statement's own error (a
// duplicate key) is not.
func TestUnavailableTellsAnOutageFromAFault(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "u.db")
	d := openTest(t, path)
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN EXCLUSIVE`); err != nil {
		t.Fatal(err)
	}
	other2, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other2.Close()
	_, err = other2.ExecContext(ctx, `DELETE FROM users`)
	if err == nil || !d.Unavailable(err) {
		t.Fatalf("a locked database (%v) is not unavailable", err)
	}
	conn.ExecContext(ctx, `ROLLBACK`)
	u := &spec.User{Email: "dup@example.com", PasswordHash: "x"}
	if _, err := d.CreateFirstUser(ctx, u.Email, u.PasswordHash); err != nil {
		t.Fatal(err)
	}
	_, err = d.Writer().ExecContext(ctx, `INSERT INTO users (id, email, password_hash, is_admin, created_at) SELECT id, email, password_hash, is_admin, created_at FROM users`)
	if err == nil || d.Unavailable(err) {
		t.Fatalf("a duplicate key (%v) counts as unavailable", err)
	}
}
