// Package bind is the one place that knows which stores exist: Open opens
// the store a --db value names (a SQLite file, or a PostgreSQL database for
// a postgres:// URL) and binds it to the engine, with the River driver that
// enqueues jobs inside the store's transactions. Nothing else names a store:
// the engine, the handlers and the commands see only the contract in
// engine/spec (spec.Store).
package bind

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"homework/db"
	"homework/db/pg"
	"homework/engine"
	"homework/engine/spec"
)

// Options configure Open.
type Options struct {
	// URL is the --db value: a SQLite file path, or a postgres:// URL.
	URL string
	// Serve is set for a server (as opposed to a short command): on SQLite
	// it takes the file's lock, so that a second server refuses to start.
	Serve bool
	// Publish receives every committed transaction's events, in commit
	// order (engine.Relay.Deliver); nil for a short command.
	Publish func([]*spec.Event)
	// OnInterrupt is told the runs any process interrupted (PostgreSQL):
	// the engine stops the run's iteration if it works it.
	OnInterrupt func(runID string)
	// OnListenError is told when the PostgreSQL event listener lost its
	// connection (subscribers then replay from the database).
	OnListenError func(error)
}

// Store is an open store: the contract, and how to bind it to the engine.
type Store struct {
	spec.Store
	// Name names the database for messages (a URL's password redacted).
	Name string
	// Shared says several server processes may use the database at once
	// (PostgreSQL): the engine then recovers only what dead or silent
	// processes left.
	Shared bool
	// Backend binds the store to the engine.
	Backend engine.Backend
}

// IndexPending implements spec.SearchIndexer for the store it wraps, when
// that store indexes documents later than it writes them; otherwise
// nothing waits.
func (s *Store) IndexPending(ctx context.Context) error {
	if ip, ok := s.Store.(spec.SearchIndexer); ok {
		return ip.IndexPending(ctx)
	}
	return nil
}

// ErrLocked is returned by Open when another server uses the SQLite file.
var ErrLocked = db.ErrLocked

// Open opens (creating and migrating as needed) the store o.URL names.
func Open(ctx context.Context, o Options) (*Store, error) {
	if pg.IsURL(o.URL) {
		name := pg.Redact(o.URL)
		d, err := pg.Open(ctx, pg.Options{URL: o.URL, OnEvents: o.Publish, OnInterrupt: o.OnInterrupt, OnListenError: o.OnListenError})
		if err != nil {
			return nil, fmt.Errorf("open database %s: %w", name, err)
		}
		return &Store{Store: d, Name: name, Shared: true, Backend: Postgres(d)}, nil
	}
	d, err := db.Open(ctx, db.Options{Path: o.URL, Lock: o.Serve, OnEvents: o.Publish})
	if err != nil {
		if errors.Is(err, db.ErrLocked) {
			return nil, err
		}
		return nil, fmt.Errorf("open database %s: %w", o.URL, err)
	}
	return &Store{Store: d, Name: o.URL, Backend: SQLite(d)}, nil
}

// SQLite binds the SQLite store: its transactions and riversqlite share
// one *sql.Tx on the store's single writer connection.
func SQLite(d *db.DB) engine.Backend {
	return engine.Bind(d, riversqlite.New(d.Writer()), func(tx spec.Tx) *sql.Tx { return tx.(*db.Tx).SQL })
}

// Postgres binds the PostgreSQL store: its transactions and riverpgxv5
// share one pgx.Tx from the store's pool.
func Postgres(d *pg.DB) engine.Backend {
	return engine.Bind(d, riverpgxv5.New(d.Pool()), func(tx spec.Tx) pgx.Tx { return tx.(*pg.Tx).PG })
}

// Shared reports whether the database url names may be shared by several
// server processes (a PostgreSQL URL, as opposed to a SQLite file).
func Shared(url string) bool { return pg.IsURL(url) }

// Redact returns url fit for messages: a PostgreSQL URL's password hidden.
func Redact(url string) string {
	if pg.IsURL(url) {
		return pg.Redact(url)
	}
	return url
}
