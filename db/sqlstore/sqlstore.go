// Package sqlstore is the store logic both databases share: every query,
// every row's encoding and decoding, written once in SQL that SQLite and
// PostgreSQL both read. The differences between the two are isolated in a
// Dialect (placeholders, row locks, full-text search, error codes) and in
// the two packages that open each database and add what only it does:
// package db (SQLite: one writer, group commit, a seq cache) and package
// db/pg (PostgreSQL: several processes, NOTIFY, advisory locks, liveness).
//
// Queries are written with ? placeholders; a Conn of a database whose
// driver numbers them ($1, $2, …) rewrites them (Rebind). Times are stored
// as integer milliseconds since the Unix epoch, JSON as text, booleans as
// whatever the column is (both drivers convert).
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"homework/engine/spec"
)

// Conn runs statements: a connection pool of one of the databases, or one
// of its transactions.
type Conn interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// QueryRow returns a row whose Scan returns sql.ErrNoRows when the
	// query returned none.
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Rows is a query's result set.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a single-row query's result.
type Row interface{ Scan(dest ...any) error }

// Dialect is what differs between the databases in the SQL this package
// writes.
type Dialect struct {
	// Name is "sqlite" or "postgres".
	Name string
	// ForUpdate locks the rows a SELECT in a write transaction reads (" FOR
	// UPDATE"); "" where a transaction holds the whole database (SQLite).
	ForUpdate string
	// SetOnlyChangedKeys makes UpdateRun leave the columns runs' indexes
	// read out of its SET list when they did not change: SQLite rewrites
	// an index's entries for every column set, changed or not. PostgreSQL
	// compares the values itself (and must see every parameter typed).
	SetOnlyChangedKeys bool
	// IsUniqueViolation and IsForeignKeyViolation recognise constraint
	// failures.
	IsUniqueViolation     func(error) bool
	IsForeignKeyViolation func(error) bool
	// LockUsers, where several processes write, locks the users table
	// against concurrent inserts for the rest of a transaction (so that two
	// first-account setups cannot both succeed); "" otherwise.
	LockUsers string
	// JSONField is the SQL expression of field key (a dotted path for a
	// nested one: "budgets.max_cost_usd") of the JSON text column col, as
	// text (NULL when missing).
	JSONField func(col, key string) string
	// Contains is the SQL condition that text column col holds lit (a
	// literal without quotes), case-sensitively: cheaper than LIKE '%lit%'.
	Contains func(col, lit string) string
	// Search is the database's full-text search (documents, transcripts,
	// run objectives).
	Search Search
	// ByteOrder follows a text column in a comparison to compare it byte
	// by byte (the order of prefixes: every path under "f/" lies in
	// ["f/", "f0")); "" where that is the column's collation already.
	ByteOrder string
	// SlotsLock is the statement that takes, for the rest of a
	// transaction, the lock that serialises a user's slot promotions
	// across processes, and its arguments; nil where transactions are
	// serialised anyway.
	SlotsLock func(userID int64) (string, []any)
}

// Deferrer is a Conn that can hold a write back and send it with the
// transaction's next statement, or its commit, in one round trip. The write
// fails that statement (and the transaction) when it fails, with its error
// wrapped in label, or with miss when want >= 0 and it changed another
// number of rows.
type Deferrer interface {
	ExecDeferred(ctx context.Context, want int64, miss error, label, query string, args ...any) error
}

// Pipeliner is a Conn that can send a statement and a query to run after
// it in one round trip, each with its own snapshot as if sent one after
// the other: the query sees what committed while the statement waited for
// a lock.
type Pipeliner interface {
	QueryAfter(ctx context.Context, first string, firstArgs []any, query string, args ...any) (Rows, error)
}

// Search is a database's full-text search: every word of a query
// required, taken literally (never the engine's query syntax).
type Search interface {
	// RunMatch returns a condition on runs, and its arguments, that holds
	// for the user's runs whose objective or documents hold every word of
	// q; "" when q has no words.
	RunMatch(q string, userID int64) (string, []any)
	// DocumentMatch returns how to find the documents (alias d) that hold
	// every word of q: the FROM and WHERE clauses, the snippet and ORDER
	// BY expressions, and the arguments of the FROM and WHERE clauses, in
	// that order. from is "" when q has no words.
	DocumentMatch(q string) (from, where, snippet, order string, args []any)
	// ILike is the operator of a case-insensitive LIKE.
	ILike() string
}

// Rebinder numbers a query's ? placeholders ($1, $2, …), remembering each
// query it rewrote. The zero value is ready to use.
type Rebinder struct{ done sync.Map }

// Rebind returns q with its ? placeholders numbered and its ?NNN ones
// written $NNN. A ? inside a quoted string or identifier is left alone.
func (r *Rebinder) Rebind(q string) string {
	if v, ok := r.done.Load(q); ok {
		return v.(string)
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			// ?NNN is SQLite's numbered placeholder: $NNN.
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			b.WriteByte('$')
			if j > i+1 {
				b.WriteString(q[i+1 : j])
				i = j - 1
			} else {
				n++
				b.WriteString(strconv.Itoa(n))
			}
			continue
		}
		b.WriteByte(c)
	}
	out := b.String()
	r.done.Store(q, out)
	return out
}

// ms encodes a time as milliseconds, NULL for the zero time.
func ms(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// fromMS decodes a nullable millisecond time.
func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// msTime decodes a millisecond time.
func msTime(v int64) time.Time { return time.UnixMilli(v).UTC() }

// nullString encodes "" as NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// notFound maps sql.ErrNoRows to an ENOTFOUND error naming what was missing.
func notFound(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return spec.Errorf(spec.ENOTFOUND, "%s not found.", what)
	}
	return err
}

// placeholders returns n comma-separated placeholders.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}
