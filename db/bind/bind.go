// Package bind binds each store to the engine: the store's write
// transactions and the River driver that enqueues jobs inside them. It is
// the one place that knows both a store and the engine, so neither names
// the other.
package bind

import (
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"homework/db"
	"homework/db/pg"
	"homework/engine"
)

// SQLite binds the SQLite store: its transactions and riversqlite share
// one *sql.Tx on the store's single writer connection.
func SQLite(d *db.DB) engine.Backend {
	return engine.Bind(d, riversqlite.New(d.Writer()), func(tx *db.Tx) *sql.Tx { return tx.SQL })
}

// Postgres binds the PostgreSQL store: its transactions and riverpgxv5
// share one pgx.Tx from the store's pool.
func Postgres(d *pg.DB) engine.Backend {
	return engine.Bind(d, riverpgxv5.New(d.Pool()), func(tx *pg.Tx) pgx.Tx { return tx.PG })
}

// Compile-time checks that both stores implement the engine's contract.
var (
	_ engine.TxStore[*db.Tx] = (*db.DB)(nil)
	_ engine.StoreTx         = (*db.Tx)(nil)
	_ engine.TxStore[*pg.Tx] = (*pg.DB)(nil)
	_ engine.StoreTx         = (*pg.Tx)(nil)
	_ engine.Heartbeats      = (*pg.DB)(nil)
	_ engine.Liveness        = (*pg.DB)(nil)
)
