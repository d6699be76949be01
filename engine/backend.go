package engine

import (
	"fmt"

	"homework/engine/spec"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
)

// Backend binds the engine to one store: the store's write transactions and
// a River driver that enqueues jobs inside them. Build it with Bind, outside
// the engine (cmd/homework binds SQLite or PostgreSQL), so the engine never
// names a store.
type Backend struct {
	store    spec.Store
	newQueue func(cfg *river.Config) (jobQueue, error)
	// listens is whether the driver wakes fetches through a listener
	// (PostgreSQL's LISTEN/NOTIFY); without one River only polls.
	listens bool
}

// Bind binds a store to a River driver whose transactions have type TTx;
// driverTx returns the TTx a transaction of the store runs on. A state
// change and the job that follows from it then commit together.
//
//	engine.Bind(d, riversqlite.New(d.Writer()), func(tx spec.Tx) *sql.Tx { return tx.(*db.Tx).SQL })
func Bind[TTx any](s spec.Store, driver riverdriver.Driver[TTx], driverTx func(spec.Tx) TTx) Backend {
	return Backend{
		store: s,
		newQueue: func(cfg *river.Config) (jobQueue, error) {
			client, err := river.NewClient(driver, cfg)
			if err != nil {
				return nil, fmt.Errorf("river client: %w", err)
			}
			return &riverQueue[TTx]{client: client, driverTx: driverTx}, nil
		},
		listens: driver.SupportsListener(),
	}
}

// bound reports whether b was built by Bind.
func (b Backend) bound() bool { return b.store != nil && b.newQueue != nil }
