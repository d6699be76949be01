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
}

// Bind binds a store to a River driver whose transactions have type TTx;
// driverTx returns the TTx a transaction of the store runs on. A state
// change and the job that follows from it then commit together.
//
//	engine.Bind(d, riversqlite.New(d.Writer()), func(tx spec.Tx) *sql.Tx { return tx.(*db.Tx).SQL })
func Bind[TTx any](s spec.Store, driver riverdriver.Driver[TTx], driverTx func(spec.Tx) TTx) Backend {
	// River's fetch is woken by the engine, in this process, right after
	// the transaction that inserted a job commits (wake.go), and otherwise
	// polls: on SQLite River's "listener" would be a notification table
	// polled every 50 ms, and on PostgreSQL a NOTIFY per insert that wakes
	// a fetch in every process, most of them empty. With several processes
	// the one whose commit enqueued a run's next iteration works it; another
	// process takes a job this one cannot (all its workers busy) at its next
	// poll. With 4 processes working 32 runs of 8 iterations, fetches per
	// iteration went from 9.2 to 6.2 (what is left is the polls), and no job
	// waits for a poll because River's insert limiter dropped its NOTIFY.
	// Without a listener River's own control messages (a job canceled in
	// another process, a queue paused) do not travel either; the engine
	// uses neither: an iteration is stopped through the store's Interrupt,
	// and an attempt that lost its run writes nothing.
	return Backend{
		store: s,
		newQueue: func(cfg *river.Config) (jobQueue, error) {
			w := &waker{pilot: &wakingPilot{}}
			client, err := river.NewClient(&wakingDriver[TTx]{Driver: driver, pilot: w.pilot}, cfg)
			if err != nil {
				return nil, fmt.Errorf("river client: %w", err)
			}
			// SQLite's insert without RETURNING skips a duplicate (ON
			// CONFLICT DO NOTHING); PostgreSQL's copies rows in and would
			// fail on one, so there every insert returns its row.
			fast := driver.DatabaseName() == riverdriver.DatabaseNameSQLite
			return &riverQueue[TTx]{client: client, driverTx: driverTx, waker: w, fastInsert: fast}, nil
		},
	}
}

// bound reports whether b was built by Bind.
func (b Backend) bound() bool { return b.store != nil && b.newQueue != nil }
