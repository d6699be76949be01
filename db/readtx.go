package db

import (
	"context"
	"database/sql"
	"fmt"

	"homework/db/sqlstore"
	"homework/engine/spec"
)

// beginRead begins a read-only transaction of one snapshot on the reader
// pool, for a read whose statements must agree.
func (d *DB) beginRead(ctx context.Context) (sqlstore.Conn, func(), error) {
	tx, err := d.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, nil, err
	}
	return conn{tx}, func() { tx.Rollback() }, nil
}

// ReadTx runs fn with reads that all see one snapshot of the database: one
// BEGIN on a reader connection, whose WAL read mark the first statement
// takes and every later one keeps, whatever the writer commits meanwhile.
// The connection keeps its prepared statements and its statements are
// counted in ReadQueries like any other read. fn must read only through r:
// the transaction holds one of the pool's connections until fn returns.
func (d *DB) ReadTx(ctx context.Context, fn func(r spec.ReadStore) error) error {
	tx, err := d.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback()
	return fn(sqlstore.InReadTx(conn{tx}, dialect))
}
