package db_test

import (
	"context"
	"path/filepath"
	"testing"

	"homework/db"
	"homework/db/storetest"
	"homework/engine/spec"
)

// TestConformance runs the store conformance suite against SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) spec.Store {
		d, err := db.Open(context.Background(), db.Options{Path: filepath.Join(t.TempDir(), "homework.db")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}

// TestConformanceSharedWriters runs the suite against SQLite in the
// multi-process strategy: nothing cached between write transactions.
func TestConformanceSharedWriters(t *testing.T) {
	storetest.Run(t, func(t *testing.T) spec.Store {
		d, err := db.Open(context.Background(), db.Options{Path: filepath.Join(t.TempDir(), "homework.db"), SharedWriters: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}

// TestSharedWritersSeeEachOthersSeqs appends through two stores on one file,
// as two processes would: with SharedWriters, seqs stay gap-free and unique.
func TestSharedWritersSeeEachOthersSeqs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "homework.db")
	open := func() *db.DB {
		d, err := db.Open(ctx, db.Options{Path: path, SharedWriters: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	a, b := open(), open()
	u, err := a.CreateUser(ctx, "a@example.com", "h", false)
	if err != nil {
		t.Fatal(err)
	}
	run := &spec.Run{ID: "r", UserID: u.ID, Objective: "o", Mode: "auto", Executor: "script", Config: []byte(`{}`), Status: spec.StatusQueued}
	if err := a.WriteTx(ctx, func(tx spec.Tx) error { return tx.InsertRun(ctx, run) }); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		d := a
		if i%2 == 1 {
			d = b
		}
		e, err := d.AppendEvent(ctx, "r", "tool_call", nil)
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != int64(i+1) {
			t.Fatalf("append %d through store %d got seq %d, want %d", i, i%2, e.Seq, i+1)
		}
	}
	if _, err := db.Open(ctx, db.Options{Path: path, Lock: true, SharedWriters: true}); err == nil {
		t.Fatal("Open accepted Lock with SharedWriters")
	}
}
