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
	// listens is whether River wakes fetches through the driver's listener
	// (PostgreSQL's LISTEN/NOTIFY, across processes); without one River
	// polls, and the engine wakes its own fetch after each commit.
	listens bool
}

// Bind binds a store to a River driver whose transactions have type TTx;
// driverTx returns the TTx a transaction of the store runs on. A state
// change and the job that follows from it then commit together.
//
//	engine.Bind(d, riversqlite.New(d.Writer()), func(tx spec.Tx) *sql.Tx { return tx.(*db.Tx).SQL })
func Bind[TTx any](s spec.Store, driver riverdriver.Driver[TTx], driverTx func(spec.Tx) TTx) Backend {
	// Only a store shared by several processes needs River's listener: one
	// process wakes its own fetch after each commit (wake.go). River's
	// SQLite "listener" is a notification table polled every 50 ms, which
	// would hold every next iteration back by up to that much.
	_, shared := s.(spec.Cluster)
	listens := shared && driver.SupportsListener()
	return Backend{
		store: s,
		newQueue: func(cfg *river.Config) (jobQueue, error) {
			var w *waker
			d := driver
			if !listens {
				w = &waker{pilot: &wakingPilot{}}
				d = &wakingDriver[TTx]{Driver: driver, pilot: w.pilot}
			}
			client, err := river.NewClient(d, cfg)
			if err != nil {
				return nil, fmt.Errorf("river client: %w", err)
			}
			return &riverQueue[TTx]{client: client, driverTx: driverTx, waker: w}, nil
		},
		listens: listens,
	}
}

// bound reports whether b was built by Bind.
func (b Backend) bound() bool { return b.store != nil && b.newQueue != nil }
