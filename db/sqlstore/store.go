package sqlstore

import (
	"context"
	"fmt"
	"time"
)

// Tx is one write transaction's shared methods. Each store's transaction
// type embeds it and adds what only that store does (appending events).
type Tx struct {
	c   Conn
	d   *Dialect
	now time.Time
	// runKeys holds the indexed columns of each run as this transaction
	// read or last wrote them (see UpdateRun).
	runKeys map[string]runKeys
}

// NewTx returns the shared methods of a write transaction on c whose time
// is now.
func NewTx(c Conn, d *Dialect, now time.Time) *Tx { return &Tx{c: c, d: d, now: now} }

// Now returns the time stamped once for this transaction.
func (tx *Tx) Now() time.Time { return tx.now }

// Conn returns the transaction's connection, for a store's own statements.
func (tx *Tx) Conn() Conn { return tx.c }

// Reads are the read methods of a page view (spec.ReadStore) and the other
// reads that need no transaction. On a store they query its pool, each
// statement on whichever connection is free; in a ReadTx they query one
// read transaction, so they all see one snapshot.
type Reads struct {
	c Conn
	d *Dialect
	// begin, outside a read transaction, begins one for a method whose
	// statements must agree; nil inside one.
	begin func(ctx context.Context) (Conn, func(), error)
}

// NewReads returns the reads of a pool; begin starts a read-only
// transaction of one snapshot on it.
func NewReads(c Conn, d *Dialect, begin func(ctx context.Context) (Conn, func(), error)) Reads {
	return Reads{c: c, d: d, begin: begin}
}

// InReadTx returns the reads of one read transaction.
func InReadTx(c Conn, d *Dialect) Reads { return Reads{c: c, d: d} }

// snapshot returns where a multi-statement read runs: a new read-only
// transaction on the pool, or the read transaction it is already part of.
func (r Reads) snapshot(ctx context.Context) (Conn, func(), error) {
	if r.begin == nil {
		return r.c, func() {}, nil
	}
	return r.begin(ctx)
}

// (asserted in contract.go)

// Store is what the stores share outside a transaction: the reads on their
// pool and the writes that own their transaction.
type Store struct {
	Reads
	// write runs fn in one write transaction of the store.
	write func(ctx context.Context, fn func(tx *Tx) error) error
	now   func() time.Time
}

// NewStore returns the shared store over reads, writing through write and
// telling the time with now.
func NewStore(reads Reads, write func(ctx context.Context, fn func(tx *Tx) error) error, now func() time.Time) Store {
	return Store{Reads: reads, write: write, now: now}
}

// execHeld runs a write whose only result is whether it failed: where the
// Conn can (Deferrer, PostgreSQL) it is held back and sent with the
// transaction's next statement, so a run of such writes costs no round
// trip of its own. want >= 0 is the number of rows it must change, else
// the write fails with miss. An error is wrapped in label.
func (tx *Tx) execHeld(ctx context.Context, want int64, miss error, label, query string, args ...any) error {
	if d, ok := tx.c.(Deferrer); ok {
		return d.ExecDeferred(ctx, want, miss, label, query, args...)
	}
	n, err := tx.c.Exec(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	if want >= 0 && n != want {
		return miss
	}
	return nil
}
