package pg

import "homework/engine/spec"

// The PostgreSQL store implements the store contract, and what a store
// shared by several processes adds.
var (
	_ spec.Store     = (*DB)(nil)
	_ spec.Tx        = (*Tx)(nil)
	_ spec.Cluster   = (*DB)(nil)
	_ spec.ClusterTx = (*Tx)(nil)
)
