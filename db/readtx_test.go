package db

import (
	"context"
	"path/filepath"
	"testing"

	"homework/engine/spec"
)

// TestReadTxCountsAndCachesItsStatements checks that a read transaction's
// statements are counted in ReadQueries like any other read and that the
// connection it holds answers them from its prepared statement cache.
func TestReadTxCountsAndCachesItsStatements(t *testing.T) {
	ctx := context.Background()
	d := openTest(t, filepath.Join(t.TempDir(), "h.db"), func(o *Options) { o.ReadConns = 1 })
	u, err := d.CreateUser(ctx, "rt@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	run := &spec.Run{ID: "rt", UserID: u.ID, Objective: "o", Mode: "auto", Executor: "script", Config: []byte(`{}`), Status: spec.StatusQueued}
	if err := d.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, run) }); err != nil {
		t.Fatal(err)
	}
	view := func() {
		t.Helper()
		err := d.ReadTx(ctx, func(r spec.ReadStore) error {
			if _, err := r.FindRun(ctx, u.ID, run.ID); err != nil { // 1 statement
				return err
			}
			if _, err := r.ListIterations(ctx, u.ID, run.ID); err != nil { // 2: the owner, the rows
				return err
			}
			// 2 here: the owner and the rows; no transcripts for no rows.
			// PageIterations runs in the ReadTx, not a transaction of its own.
			if _, err := r.PageIterations(ctx, u.ID, run.ID, "", 10, true); err != nil {
				return err
			}
			_, err := r.LastSeq(ctx, run.ID) // 1
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	view() // prepares what the cache lacks
	q0, p0 := d.ReadQueries(), d.readConn.prepares.Load()
	view()
	if n := d.ReadQueries() - q0; n != 6 {
		t.Errorf("a read transaction of 6 statements counted %d", n)
	}
	if n := d.readConn.prepares.Load() - p0; n != 0 {
		t.Errorf("the second read transaction prepared %d statements; want all from the cache", n)
	}
}
