package db

import (
	"path/filepath"
	"testing"
	"time"
)

// TestBoundLimitsAreReadWhenTheStatementRuns: a LIMIT given by a parameter
// (ours as ?, River's as @name) is prepared as a unary plus of it, so that
// SQLite does not compile the value in and prepare the statement again on
// every execution; the limits still hold, whatever each run binds.
func TestBoundLimitsAreReadWhenTheStatementRuns(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT id FROM t ORDER BY id LIMIT ?":               "SELECT id FROM t ORDER BY id LIMIT +?",
		"SELECT id FROM t limit\n\t?2 OFFSET ?3":             "SELECT id FROM t limit\n\t+?2 OFFSET ?3",
		"ORDER BY id ASC\n    LIMIT @max_to_lock\n)":         "ORDER BY id ASC\n    LIMIT +@max_to_lock\n)",
		"ORDER BY key DESC LIMIT @max_attempted_by - 1":      "ORDER BY key DESC LIMIT +@max_attempted_by - 1",
		"SELECT id FROM t LIMIT 5":                           "SELECT id FROM t LIMIT 5",
		"SELECT unlimited FROM t WHERE a = ? ORDER BY a":     "SELECT unlimited FROM t WHERE a = ? ORDER BY a",
		"SELECT a FROM t LIMIT :n; SELECT b FROM u LIMIT $m": "SELECT a FROM t LIMIT +:n; SELECT b FROM u LIMIT +$m",
	} {
		if got := unfoldLimits(in); got != want {
			t.Errorf("unfoldLimits(%q) = %q, want %q", in, got, want)
		}
	}

	d := openTest(t, filepath.Join(t.TempDir(), "h.db"))
	for i := 0; i < 5; i++ {
		if _, err := d.Writer().Exec(`INSERT INTO users (email, password_hash, created_at) VALUES (?, 'h', ?)`,
			string(rune('a'+i))+"@example.com", time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{1, 3, 0, 5, 2, -1} {
		rows, err := d.Reader().Query(`SELECT id FROM users ORDER BY id LIMIT ?`, limit)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		want := limit
		if limit < 0 {
			want = 5 // a negative LIMIT is none
		}
		if n != want {
			t.Errorf("LIMIT %d gave %d rows, want %d", limit, n, want)
		}
	}
}
