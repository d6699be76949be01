package engine

import (
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
)

// Backend binds the engine to one store: the store's write transactions and
// a River driver that enqueues jobs inside them. Build it with Bind, outside
// the engine (cmd/homework binds SQLite or PostgreSQL), so the engine never
// names a store.
type Backend struct {
	store    Store
	inTx     inTxFunc
	newQueue func(cfg *river.Config) (jobQueue, error)
	// listens is whether the driver wakes fetches through a listener
	// (PostgreSQL's LISTEN/NOTIFY); without one River only polls.
	listens bool
}

// Bind binds a store whose write transactions have type T to a River driver
// whose transactions have type TTx; driverTx returns the TTx a T runs on. A
// state change and the job that follows from it then commit together.
//
//	engine.Bind(d, riversqlite.New(d.Writer()), func(tx *db.Tx) *sql.Tx { return tx.Tx })
func Bind[T StoreTx, TTx any](s TxStore[T], driver riverdriver.Driver[TTx], driverTx func(T) TTx) Backend {
	return Backend{
		store: s,
		inTx:  txRunner(s),
		newQueue: func(cfg *river.Config) (jobQueue, error) {
			client, err := river.NewClient(driver, cfg)
			if err != nil {
				return nil, fmt.Errorf("river client: %w", err)
			}
			return &riverQueue[TTx]{client: client, driverTx: func(tx StoreTx) TTx {
				t, ok := tx.(T)
				if !ok {
					panic(fmt.Sprintf("engine: a %T where the backend's transactions are %T", tx, t))
				}
				return driverTx(t)
			}}, nil
		},
		listens: driver.SupportsListener(),
	}
}

// bound reports whether b was built by Bind.
func (b Backend) bound() bool { return b.store != nil && b.newQueue != nil }
