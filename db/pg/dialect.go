package pg

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"homework/db/sqlstore"
)

// rebinder numbers the shared queries' ? placeholders for PostgreSQL.
var rebinder sqlstore.Rebinder

// querier is what the pool and a transaction both offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// conn is a sqlstore.Conn over the pool or a transaction.
type pgConn struct{ q querier }

func (c pgConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, rebinder.Rebind(query), textArgs(args)...)
	return tag.RowsAffected(), err
}

func (c pgConn) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return c.q.Query(ctx, rebinder.Rebind(query), textArgs(args)...)
}

func (c pgConn) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return row{c.q.QueryRow(ctx, rebinder.Rebind(query), textArgs(args)...)}
}

// textArgs makes every string argument storable as PostgreSQL text, which
// refuses a NUL byte and invalid UTF-8 (SQLite keeps both): an agent's
// output, a fetched page or a model's reply may hold either, and the write
// must not fail over it. Each NUL and each invalid byte becomes U+FFFD, the
// replacement character. args is returned as it is when nothing needs it.
func textArgs(args []any) []any {
	var out []any
	for i, a := range args {
		s, ok := a.(string)
		if !ok || (utf8.ValidString(s) && strings.IndexByte(s, 0) < 0) {
			continue
		}
		if out == nil {
			out = slices.Clone(args)
		}
		out[i] = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	}
	if out == nil {
		return args
	}
	return out
}

// row reports pgx's no-rows error as sql.ErrNoRows, the shared code's.
type row struct{ pgx.Row }

func (r row) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlErrNoRows
	}
	return err
}

// Error codes (SQLSTATE) the store tells apart.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)

// slotsLock is the first key of the per-user advisory lock on run slots.
const slotsLock = 0x486f6d65 // "Home"

// dialect is PostgreSQL's: several processes write at once, so a write
// transaction row-locks the run it reads and takes advisory locks where a
// row is not enough; full-text search is tsvector.
var dialect = &sqlstore.Dialect{
	Name:                  "postgres",
	ForUpdate:             " FOR UPDATE",
	IsUniqueViolation:     func(err error) bool { return pgCode(err) == uniqueViolation },
	IsForeignKeyViolation: func(err error) bool { return pgCode(err) == foreignKeyViolation },
	// Two processes promoting one user's runs cannot both take the last
	// free slot: the second waits for the first to commit and then counts.
	SlotsLock: func(userID int64) (string, []any) {
		return `SELECT pg_advisory_xact_lock(?::int4, ?::int4)`, []any{int32(slotsLock), int32(userID)}
	},
	LockUsers: `LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE`,
	// The database's collation may order text by language; a C-collated
	// index (migration 0038) serves ranges in byte order.
	ByteOrder: ` COLLATE "C"`,
	Contains:  func(col, lit string) string { return "strpos(" + col + ", '" + lit + "') > 0" },
	JSONField: func(col, key string) string {
		if strings.Contains(key, ".") {
			return "(" + col + "::jsonb #>> '{" + strings.ReplaceAll(key, ".", ",") + "}')"
		}
		return "(" + col + "::jsonb ->> '" + key + "')"
	},
	Search: tsvector{},
}

// tsvector is PostgreSQL's full-text search: every word required, taken
// literally (plainto_tsquery), over the GIN-indexed tsvector columns of
// documents and run objectives.
type tsvector struct{}

// words returns the query's words, at most 16, joined.
func words(q string) string {
	w := strings.Fields(q)
	if len(w) > 16 {
		w = w[:16]
	}
	return strings.Join(w, " ")
}

func (tsvector) RunMatch(query string, userID int64) (string, []any) {
	q := words(query)
	if q == "" {
		return "", nil
	}
	return `(objective_tsv @@ plainto_tsquery('english', ?)
			OR id IN (SELECT d.run_id FROM documents d WHERE d.user_id = ?
				AND d.search @@ plainto_tsquery('english', ?)))`, []any{q, userID, q}
}

func (tsvector) DocumentMatch(query string) (from, where, snippet, order string, args []any) {
	q := words(query)
	if q == "" {
		return "", "", "", "", nil
	}
	return "documents d, plainto_tsquery('english', ?) query", "d.search @@ query",
		"ts_headline('english', d.content, query, 'StartSel=[, StopSel=], MaxWords=12, MinWords=4, FragmentDelimiter=…')",
		"ts_rank(d.search, query) DESC, d.id", []any{q}
}

func (tsvector) ILike() string { return "ILIKE" }
