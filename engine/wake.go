package engine

import (
	"context"
	"sync"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"

	"homework/engine/spec"
)

// Without a listener River only polls (the engine uses none: see Bind):
// a job inserted in a transaction waits for the next poll tick, because
// River cannot tell when the caller's transaction commits. The engine can:
// every write it makes goes through inTx. So the driver is wrapped to get
// hold of River's own "a job became available" hook (the pilot's
// NotifyNonTxJobInsert, which River made for poll-only clients), and the
// engine calls it for the queues a transaction inserted into, right after
// that transaction commits. The next iteration then starts within River's fetch cooldown
// instead of up to a poll interval later.
//
// The hook is River's plugin interface (driverPlugin, riverpilot.Pilot),
// which River marks internal: River is pinned, and the lone-run benchmark
// (cmd/homework BenchmarkLoneRunHop) and TestTheNextIterationIsNotPolledFor
// show at once if an upgrade changes it. If the hook is not called, River
// simply polls as before.

// wakingDriver is a River driver without a listener that hands its client a
// pilot that keeps River's fetch trigger.
type wakingDriver[TTx any] struct {
	riverdriver.Driver[TTx]
	pilot *wakingPilot
}

// SupportsListener is false: the client polls, and River's fetch trigger
// works only for a driver without a listener.
func (d *wakingDriver[TTx]) SupportsListener() bool { return false }

// SupportsListenNotify is false: without a listener nobody reads River's
// notification table, so a job insert does not write a row into it (one
// statement in every iteration's finishing transaction, and a table to
// prune).
func (d *wakingDriver[TTx]) SupportsListenNotify() bool { return false }

// PluginInit implements River's driverPlugin.
func (d *wakingDriver[TTx]) PluginInit(*baseservice.Archetype) {}

// PluginPilot implements River's driverPlugin.
func (d *wakingDriver[TTx]) PluginPilot() riverpilot.Pilot { return d.pilot }

// wakingPilot is River's standard pilot, keeping the client's fetch
// trigger.
type wakingPilot struct {
	riverpilot.StandardPilot
	mu     sync.Mutex
	notify func(ctx context.Context, res []*rivertype.JobInsertResult)
}

// PilotInit implements riverpilot.Pilot.
func (p *wakingPilot) PilotInit(archetype *baseservice.Archetype, params *riverpilot.PilotInitParams) {
	p.mu.Lock()
	p.notify = params.NotifyNonTxJobInsert
	p.mu.Unlock()
	p.StandardPilot.PilotInit(archetype, params)
}

// waker wakes this process's fetch for queues that have committed jobs.
type waker struct {
	pilot *wakingPilot
	mu    sync.Mutex
	// pending are the queues each transaction not yet ended inserted into.
	// They are kept per transaction: with several transactions in flight
	// (PostgreSQL), one that commits first must neither wake for the
	// others' jobs, not yet visible, nor take their wake away, which left
	// a job to the next poll.
	pending map[spec.Tx]map[string]bool
}

// inserted notes a job inserted into queue ("" is River's default) by tx.
func (w *waker) inserted(tx spec.Tx, queue string) {
	if queue == "" {
		queue = river.QueueDefault
	}
	w.mu.Lock()
	if w.pending == nil {
		w.pending = map[spec.Tx]map[string]bool{}
	}
	if w.pending[tx] == nil {
		w.pending[tx] = map[string]bool{}
	}
	w.pending[tx][queue] = true
	w.mu.Unlock()
}

// ended forgets what txs inserted, and wakes the fetch of the queues the
// last of them inserted into when it committed (the earlier ones, attempts
// of the same write, rolled back).
func (w *waker) ended(ctx context.Context, txs []spec.Tx, committed bool) {
	var queues map[string]bool
	w.mu.Lock()
	for i, tx := range txs {
		if committed && i == len(txs)-1 {
			queues = w.pending[tx]
		}
		delete(w.pending, tx)
	}
	w.mu.Unlock()
	if len(queues) == 0 {
		return
	}
	res := make([]*rivertype.JobInsertResult, 0, len(queues))
	for q := range queues {
		res = append(res, &rivertype.JobInsertResult{Job: &rivertype.JobRow{Queue: q}})
	}
	w.pilot.mu.Lock()
	notify := w.pilot.notify
	w.pilot.mu.Unlock()
	if notify != nil {
		notify(ctx, res)
	}
}
