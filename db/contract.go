package db

import "homework/engine/spec"

// The SQLite store implements the store contract.
var (
	_ spec.Store = (*DB)(nil)
	_ spec.Tx    = (*Tx)(nil)
)
