package db_test

import (
	"context"
	"path/filepath"
	"testing"

	"homework/db"
	"homework/db/storetest"
)

// TestConformance runs the store conformance suite against SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store[*db.Tx] {
		d, err := db.Open(context.Background(), db.Options{Path: filepath.Join(t.TempDir(), "homework.db")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	})
}
