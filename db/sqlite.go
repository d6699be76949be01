package db

import (
	"context"
	"database/sql"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"

	"homework/db/sqlstore"
)

// conn is a sqlstore.Conn over a database/sql pool or transaction.
type conn struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (c conn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c conn) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := c.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (c conn) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return c.q.QueryRowContext(ctx, query, args...)
}

// sqlRows adapts *sql.Rows, whose Close returns an error (Err has it).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// dialect is SQLite's: one writer at a time holds the whole database, so
// nothing is row-locked; full-text search is FTS5.
var dialect = &sqlstore.Dialect{
	Name:                  "sqlite",
	SetOnlyChangedKeys:    true,
	IsUniqueViolation:     isUniqueViolation,
	IsForeignKeyViolation: isForeignKeyViolation,
	JSONField:             func(col, key string) string { return "json_extract(" + col + ", '$." + key + "')" },
	Contains:              func(col, lit string) string { return "instr(" + col + ", '" + lit + "') > 0" },
	Search:                fts5{},
}

// fts5 is SQLite's full-text search over the documents_fts and runs_fts
// indexes.
type fts5 struct{}

// ftsQuery turns free text into a safe FTS5 query: each word quoted, all
// required, so user input can never be FTS5 syntax.
func ftsQuery(s string) string {
	var terms []string
	for _, w := range strings.Fields(s) {
		w = strings.ReplaceAll(w, `"`, `""`)
		terms = append(terms, `"`+w+`"`)
		if len(terms) == 16 {
			break
		}
	}
	return strings.Join(terms, " ")
}

func (fts5) RunMatch(query string, userID int64) (string, []any) {
	q := ftsQuery(query)
	if q == "" {
		return "", nil
	}
	return `(rowid IN (SELECT rowid FROM runs_fts WHERE runs_fts MATCH ?)
			OR id IN (SELECT d.run_id FROM documents_fts JOIN documents d ON d.rowid = documents_fts.rowid
				WHERE documents_fts MATCH ? AND d.user_id = ?))`, []any{q, q, userID}
}

func (fts5) DocumentMatch(query string) (from, where, snippet, order string, args []any) {
	q := ftsQuery(query)
	if q == "" {
		return "", "", "", "", nil
	}
	return "documents_fts JOIN documents d ON d.rowid = documents_fts.rowid", "documents_fts MATCH ?",
		"snippet(documents_fts, 2, '[', ']', '…', 12)", "bm25(documents_fts)", []any{q}
}

// ILike is LIKE: SQLite's is case-insensitive for ASCII.
func (fts5) ILike() string { return "LIKE" }

// isUniqueViolation reports whether err is a UNIQUE constraint failure.
func isUniqueViolation(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// isForeignKeyViolation reports whether err is a failed foreign key.
func isForeignKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
