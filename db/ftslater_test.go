package db

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"homework/engine/spec"
)

// pendingCount returns how many documents wait to be indexed.
func pendingCount(t *testing.T, d *DB) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(`SELECT COUNT(*) FROM documents_fts_pending`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ftsIntegrity runs FTS5's integrity check of documents_fts against its
// content table: every document indexed once, with its current content.
func ftsIntegrity(t *testing.T, d *DB) {
	t.Helper()
	if _, err := d.Writer().Exec(`INSERT INTO documents_fts(documents_fts, rank) VALUES ('integrity-check', 1)`); err != nil {
		t.Fatalf("documents_fts integrity check: %v", err)
	}
}

// waitNoPending waits until nothing waits to be indexed, for the goroutine
// that indexes it after commits (a failure says it never did).
func waitNoPending(t *testing.T, d *DB) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); pendingCount(t, d) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d documents still wait to be indexed", pendingCount(t, d))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func putDoc(t *testing.T, d *DB, doc *spec.Document) {
	t.Helper()
	if err := d.WriteTx(context.Background(), func(tx spec.Tx) error {
		_, err := tx.PutDocument(context.Background(), doc)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func searchCount(t *testing.T, d *DB, userID int64, q string) int {
	t.Helper()
	hits, err := d.SearchDocuments(context.Background(), userID, "", q, 100)
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	return len(hits)
}

// TestSummariesAreIndexedLater: an iteration summary waits for the
// full-text index (other documents do not); a search indexes what waits
// first, the 32nd waiting summary indexes all of them, and updates and
// deletes of waiting and indexed summaries keep the index exact.
func TestSummariesAreIndexedLater(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	d.fts.close() // what waits stays until this test has looked at it
	u, err := d.CreateUser(ctx, "a@example.com", "hash", true)
	if err != nil {
		t.Fatal(err)
	}
	newRun(t, d, u.ID, "r1")

	putDoc(t, d, &spec.Document{RunID: "r1", Path: "notes/a.md", Kind: spec.DocNote, Content: "an albatross note"})
	if n := pendingCount(t, d); n != 0 {
		t.Fatalf("a note waits to be indexed (%d waiting)", n)
	}
	sum := &spec.Document{RunID: "r1", Path: "iterations/001-summary.md", Kind: spec.DocSummary, Content: "a bison summary"}
	putDoc(t, d, sum)
	if n := pendingCount(t, d); n != 1 {
		t.Fatalf("%d documents wait after a summary, want 1", n)
	}
	if n := searchCount(t, d, u.ID, "bison"); n != 1 {
		t.Fatalf("search for a waiting summary: %d hits", n)
	}
	if n := pendingCount(t, d); n != 0 {
		t.Fatalf("%d documents wait after a search", n)
	}
	ftsIntegrity(t, d)

	// A waiting summary updated, then deleted; an indexed one deleted.
	putDoc(t, d, &spec.Document{RunID: "r1", Path: "iterations/002-summary.md", Kind: spec.DocSummary, Content: "a camel summary"})
	upd := &spec.Document{RunID: "r1", Path: "iterations/002-summary.md", Kind: spec.DocSummary, Content: "a dingo summary"}
	putDoc(t, d, upd)
	if n := pendingCount(t, d); n != 1 {
		t.Fatalf("%d documents wait after a waiting summary's update, want 1", n)
	}
	putDoc(t, d, &spec.Document{RunID: "r1", Path: "iterations/003-summary.md", Kind: spec.DocSummary, Content: "an eland summary"})
	for _, id := range []string{upd.ID, sum.ID} {
		if _, err := d.Writer().Exec(`DELETE FROM documents WHERE id = ?`, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := pendingCount(t, d); n != 1 {
		t.Fatalf("%d documents wait after a waiting summary's delete, want 1", n)
	}
	for q, want := range map[string]int{"bison": 0, "camel": 0, "dingo": 0, "eland": 1, "albatross": 1} {
		if n := searchCount(t, d, u.ID, q); n != want {
			t.Errorf("search %q: %d hits, want %d", q, n, want)
		}
	}
	ftsIntegrity(t, d)

	// The 32nd waiting summary indexes them all, without a search.
	for i := range 32 {
		putDoc(t, d, &spec.Document{RunID: "r1", Path: fmt.Sprintf("iterations/%03d-summary.md", 10+i), Kind: spec.DocSummary,
			Content: fmt.Sprintf("flamingo step %d", i)})
	}
	if n := pendingCount(t, d); n != 0 {
		t.Fatalf("%d documents wait after 32 summaries", n)
	}
	ftsIntegrity(t, d)
	if n := searchCount(t, d, u.ID, "flamingo"); n != 32 {
		t.Fatalf("search for 32 summaries: %d hits", n)
	}
	page, err := d.ListRuns(ctx, u.ID, spec.RunFilter{Query: "flamingo"})
	if err != nil || len(page.Runs) != 1 {
		t.Fatalf("runs matching the summaries: %+v (%v)", page, err)
	}
}

// TestWaitingSummariesAreIndexedAfterCommit: what waits is indexed shortly
// after the commit that queued it without any search, and what a closed
// store left waiting is indexed once it is opened again.
func TestWaitingSummariesAreIndexedAfterCommit(t *testing.T) {
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
	putDoc(t, d, &spec.Document{RunID: "r1", Path: "iterations/001-summary.md", Kind: spec.DocSummary, Content: "a gecko summary"})
	waitNoPending(t, d)
	ftsIntegrity(t, d)

	putDoc(t, d, &spec.Document{RunID: "r1", Path: "iterations/002-summary.md", Kind: spec.DocSummary, Content: "a heron summary"})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openTest(t, path)
	waitNoPending(t, d)
	ftsIntegrity(t, d)
	// Counted through the reader alone: the search itself finds nothing to
	// index.
	var n int
	if err := d.Reader().QueryRow(`SELECT COUNT(*) FROM documents_fts WHERE documents_fts MATCH 'gecko OR heron'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("indexed summaries: %d (%v)", n, err)
	}
}
