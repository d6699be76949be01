package db

import (
	"context"
	"database/sql"
	"fmt"

	"homework/engine/spec"
)

// reads holds the read methods a page view uses (spec.ReadStore). On the
// DB they query the reader pool, each statement on whichever connection is
// free; in a ReadTx they query one read transaction, so they all see one
// snapshot.
type reads struct {
	q queryer
	// pool is the reader pool outside a ReadTx, nil inside one: a method
	// that needs several statements to agree begins its own transaction
	// only when it is not already in one.
	pool *sql.DB
}

var _ spec.ReadStore = reads{}

// begin returns where a multi-statement read runs: a new read-only
// transaction on the pool, or the ReadTx it is already part of.
func (d reads) begin(ctx context.Context) (queryer, func(), error) {
	if d.pool == nil {
		return d.q, func() {}, nil
	}
	tx, err := d.pool.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, nil, err
	}
	return tx, func() { tx.Rollback() }, nil
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
	return fn(reads{q: tx})
}
