package engine

import (
	"context"
	"sync"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"
)

// Without a listener River only polls (the engine uses none: see Bind):
// a job inserted in a transaction waits for the next poll tick, because
// River cannot tell when the caller's transaction commits. The engine can: every write it makes
// goes through inTx. So the driver is wrapped to get hold of River's own
// "a job became available" hook (the pilot's NotifyNonTxJobInsert, which
// River made for poll-only clients), and the engine calls it for the
// queues a transaction inserted into, right after that transaction
// commits. The next iteration then starts within River's fetch cooldown
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
	// pending are the queues inserted into by transactions not yet seen
	// to end. A wake for a transaction that then rolled back, or one that
	// another transaction's commit takes along, costs one empty fetch.
	pending map[string]bool
}

// inserted notes a job inserted into queue ("" is River's default).
func (w *waker) inserted(queue string) {
	if w == nil {
		return
	}
	if queue == "" {
		queue = river.QueueDefault
	}
	w.mu.Lock()
	if w.pending == nil {
		w.pending = map[string]bool{}
	}
	w.pending[queue] = true
	w.mu.Unlock()
}

// committed wakes the fetch of every pending queue.
func (w *waker) committed(ctx context.Context) {
	if w == nil {
		return
	}
	w.mu.Lock()
	if len(w.pending) == 0 {
		w.mu.Unlock()
		return
	}
	res := make([]*rivertype.JobInsertResult, 0, len(w.pending))
	for q := range w.pending {
		res = append(res, &rivertype.JobInsertResult{Job: &rivertype.JobRow{Queue: q}})
	}
	clear(w.pending)
	w.mu.Unlock()
	w.pilot.mu.Lock()
	notify := w.pilot.notify
	w.pilot.mu.Unlock()
	if notify != nil {
		notify(ctx, res)
	}
}
