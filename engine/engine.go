// Package engine owns runs: their state machine, the River workers that run
// their iterations (a job's worker goes on with its run's next iterations
// for a while: see iterate), the gate (stop hook), budgets and breakers, leases
// and recovery, the event bus and notifications. It has no HTTP and no SQL:
// it works a store through the contract in store.go (bound by Bind, outside
// the engine) and is called by handlers/.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"

	"homework/engine/proc"
	"homework/engine/spec"
)

// Options configure an Engine. Zero values get the defaults noted.
type Options struct {
	Backend   Backend             // required: the store and its River driver, from Bind
	Bus       *Bus                // required: the bus the store's OnEvents publishes to
	Executors map[string]Executor // by executor name (spec.ExecutorLLM, ...)
	Logger    *slog.Logger
	Now       func() time.Time

	Workers                int           // River MaxWorkers; default 4
	MaxConcurrentPerUser   int           // running runs per user; default 3
	MaxObjectiveBytes      int           // default 20,000
	MaxIterations          int           // server maximum for budgets.max_iterations; default 1,000
	MaxRunningTime         time.Duration // server maximum for max_running_ms; default 24 h
	DefaultRunningTime     time.Duration // default max_running_ms; 60 min
	MaxCostUSD             float64       // server maximum; default 1,000
	MaxTokens              int64         // server maximum; default 100,000,000
	MaxToolCalls           int           // server maximum; default 100,000
	DefaultIterationTime   time.Duration // per-iteration timeout; default 10 min
	MaxIterationTime       time.Duration // default 2 h
	DefaultIterationTools  int           // per-iteration tool-call bound; default 50
	LeaseTTL               time.Duration // default 15 s
	RecoveryInterval       time.Duration // default 5 s
	DeathWatchInterval     time.Duration // how often a spec.Cluster store is asked for dead processes; default 200 ms
	ShutdownGrace          time.Duration // in-flight iterations get this long on Stop; default 10 s
	FetchPollInterval      time.Duration // River poll; default 50 ms
	CommandRunsAllowed     bool          // whether command checks may run for admins
	NarrateTimeout         time.Duration // default 60 s
	EndpointBackoffBase    time.Duration // first wait after an iteration failed on the model endpoint; default 2 s
	EndpointBackoffMax     time.Duration // cap of that wait (Retry-After may ask up to 15 min); default 2 min
	DisableRecoveryAtStart bool          // tests only
	// ContinueFor is how long after its job's first iteration began a
	// worker may still begin its run's next iteration itself, in the
	// transaction that finishes the one before, instead of enqueueing it (a
	// job each); default 1 s, negative: never. It bounds when an iteration
	// may begin there, not how long it runs. Past it the next iteration is
	// enqueued, behind the other runs' jobs.
	ContinueFor time.Duration

	// PublicURL is the server's address as people reach it: the base of
	// the run links in webhook deliveries.
	PublicURL           string
	WebhookAllowHTTP    bool          // accept http:// endpoint URLs, not only https://
	WebhookAllowPrivate bool          // deliver to loopback, private, link-local and multicast addresses
	WebhookTimeout      time.Duration // one delivery attempt; default 10 s
	WebhookBackoffBase  time.Duration // wait after the first failed attempt; default 5 s
	WebhookBackoffMax   time.Duration // longest wait between attempts; default 1 h
	WebhookRetryFor     time.Duration // how long a delivery is retried; default 24 h
	WebhookWorkers      int           // concurrent deliveries; default 4
	WebhookDisableAfter time.Duration // an endpoint failing this long is disabled; default 3 days

	// SharedStore says other engines work the same store: Start then leaves
	// leases to the periodic recovery pass, which takes only expired ones.
	// See singleprocess.go for every single-process assumption.
	SharedStore bool

	// CommandHost and CommandRoot identify, on a shared store, the host of
	// this process and its command-run root: command runs created here are
	// bound to them and run only on processes with both (hostqueue.go).
	CommandHost string
	CommandRoot string
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Workers, 4)
	def(&o.MaxConcurrentPerUser, 3)
	def(&o.MaxObjectiveBytes, 20000)
	def(&o.MaxIterations, 1000)
	def(&o.MaxToolCalls, 100000)
	def(&o.DefaultIterationTools, 50)
	defD(&o.MaxRunningTime, 24*time.Hour)
	defD(&o.DefaultRunningTime, 60*time.Minute)
	defD(&o.DefaultIterationTime, 10*time.Minute)
	defD(&o.MaxIterationTime, 2*time.Hour)
	defD(&o.LeaseTTL, 15*time.Second)
	if o.ContinueFor == 0 {
		o.ContinueFor = time.Second
	}
	defD(&o.RecoveryInterval, 5*time.Second)
	defD(&o.DeathWatchInterval, 200*time.Millisecond)
	defD(&o.ShutdownGrace, 10*time.Second)
	defD(&o.FetchPollInterval, 50*time.Millisecond)
	defD(&o.NarrateTimeout, 60*time.Second)
	defD(&o.EndpointBackoffBase, 2*time.Second)
	defD(&o.EndpointBackoffMax, 2*time.Minute)
	defD(&o.WebhookTimeout, 10*time.Second)
	defD(&o.WebhookBackoffBase, 5*time.Second)
	defD(&o.WebhookBackoffMax, time.Hour)
	defD(&o.WebhookRetryFor, 24*time.Hour)
	def(&o.WebhookWorkers, 4)
	defD(&o.WebhookDisableAfter, 72*time.Hour)
	if o.MaxCostUSD <= 0 {
		o.MaxCostUSD = 1000
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 100_000_000
	}
}

// Engine runs runs.
type Engine struct {
	settled settledSums // per run, its settled iterations' metrics summed
	opts    Options
	bus     *Bus
	log     *slog.Logger
	now     func() time.Time
	id      string // lease owner id of this process
	store   spec.Store
	inTx    inTxFunc // runs a function in one write transaction of the store
	// groupTx runs a small write that inserts no job and must commit at
	// once (a model call's record), sharing its commit with concurrent
	// ones where the store can (spec.GroupWriter); inTx otherwise.
	groupTx inTxFunc
	queue   jobQueue // River: enqueues iterate jobs inside such a transaction
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu       sync.Mutex
	inflight map[string]*inflight // by run id
	stopping bool                 // Stop was called: no iteration begins in place (attempt)

	// noLiveness is set while this process's liveness session is lost
	// (spec.Cluster.HoldLiveness): no attempt may begin then.
	noLiveness atomic.Bool

	metrics *Metrics

	webhookClient *http.Client // posts webhook deliveries (webhook.go)
}

type inflight struct {
	cancel context.CancelCauseFunc
	// cut ends the attempt's work (its executor and checks) with a
	// budgetCut when a budget is used up during it; the attempt goes on to
	// record its outcome under its lease.
	cut                context.CancelCauseFunc
	leash              *proc.Leash // the attempt's processes
	iteration, attempt int
	done               chan struct{} // closed when the attempt has returned
	// abandoned is set when the watchdog gave the attempt up: recovery may
	// then take its run over although it has not returned.
	abandoned atomic.Bool
}

// giveUp ends the attempt's hold on its run: its processes are killed at
// once and its context is canceled with errLeaseLost, so that it returns
// leaving no trace.
func (f *inflight) giveUp() {
	f.leash.Close()
	f.cancel(errLeaseLost)
}

// errRunCanceled is the cancel cause of an iteration whose run was canceled.
var errRunCanceled = errors.New("run canceled")

// New returns an engine. It does not start working until Start.
func New(opts Options) (*Engine, error) {
	if !opts.Backend.bound() || opts.Bus == nil {
		return nil, errors.New("engine: a Backend (from Bind) and a Bus are required")
	}
	opts.setDefaults()
	b := make([]byte, 8)
	rand.Read(b)
	e := &Engine{
		opts:  opts,
		bus:   opts.Bus,
		log:   opts.Logger.With("component", "engine"),
		now:   opts.Now,
		id:    hex.EncodeToString(b),
		store: opts.Backend.store,

		inflight: map[string]*inflight{},
		metrics:  newMetrics(),

		webhookClient: newWebhookClient(opts),
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &iterateWorker{e: e})
	river.AddWorker(workers, &webhookWorker{e: e})
	queue, err := opts.Backend.newQueue(&river.Config{
		Queues:               riverQueues(opts),
		Workers:              workers,
		FetchCooldown:        min(opts.FetchPollInterval, 2*time.Millisecond), // fetch again soon after an insert or a free slot
		FetchPollInterval:    opts.FetchPollInterval,
		JobTimeout:           -1, // iterations carry their own timeout
		RescueStuckJobsAfter: 24 * time.Hour,
		MaxAttempts:          5,
		Logger:               riverLogger(opts.Logger),
		// The engine wakes River's fetch after its commits (Bind).
		PollOnly: true,
	})
	if err != nil {
		return nil, err
	}
	e.queue = queue
	e.inTx = func(ctx context.Context, fn func(tx spec.Tx) error) error {
		var txs []spec.Tx // a retried write runs in several
		err := opts.Backend.store.WriteTx(ctx, func(tx spec.Tx) error {
			txs = append(txs, tx)
			return fn(tx)
		})
		queue.Ended(ctx, txs, err == nil) // jobs it inserted start now, not at the next poll
		return err
	}
	e.groupTx = e.inTx
	if gw, ok := opts.Backend.store.(spec.GroupWriter); ok {
		e.groupTx = gw.GroupWriteTx
	}
	return e, nil
}

// Bus returns the engine's event bus.
func (e *Engine) Bus() *Bus { return e.bus }

// Metrics returns the engine's Prometheus collectors.
func (e *Engine) Metrics() *Metrics { return e.metrics }

// Start recovers runs interrupted by a previous process, then starts River
// and the lease recovery loop. The loop exits when Stop is called.
func (e *Engine) Start(ctx context.Context) error {
	if !e.opts.DisableRecoveryAtStart && !e.opts.SharedStore {
		if _, err := e.recoverAtStart(ctx); err != nil {
			return fmt.Errorf("recover runs: %w", err)
		}
		// A webhook delivery whose POST was in flight when the last process
		// died would wait for River's stuck-job rescue (a day): it is sent
		// again now, with its webhook-id. Alone on the queue, this process
		// knows that every running job belonged to a dead one.
		if err := e.resendInterruptedWebhooks(ctx); err != nil {
			return fmt.Errorf("recover webhook deliveries: %w", err)
		}
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	watch, err := e.holdLiveness(loopCtx)
	if err != nil {
		cancel()
		return fmt.Errorf("hold liveness: %w", err)
	}
	if err := e.queue.Start(ctx); err != nil {
		cancel()
		return fmt.Errorf("start river: %w", err)
	}
	e.cancel = cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.recoveryLoop(loopCtx)
	}()
	if watch {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.deathWatch(loopCtx)
		}()
	}
	return nil
}

// Stop stops taking jobs, gives in-flight iterations ShutdownGrace to finish,
// then cancels them, leaving their runs recoverable at the next start. It
// returns when every engine goroutine has exited or ctx ends.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	if e.cancel != nil {
		e.cancel()
	}
	grace := e.opts.ShutdownGrace
	if dl, ok := ctx.Deadline(); ok {
		// Leave part of the caller's bound (a third, at most 5 s) for
		// cancelling what is left.
		left := time.Until(dl)
		grace = min(grace, left-min(left/3, 5*time.Second))
	}
	graceCtx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	err := e.queue.Stop(graceCtx)
	if err != nil {
		// Grace is over: cancel in-flight iterations; their runs keep
		// their lease and are recovered at the next start.
		e.mu.Lock()
		for _, f := range e.inflight {
			f.cancel(errShutdown)
		}
		e.mu.Unlock()
		deadline := time.Now().Add(5 * time.Second)
		if dl, ok := ctx.Deadline(); ok {
			deadline = dl
		}
		stopCtx, cancel2 := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel2()
		if err2 := e.queue.StopAndCancel(stopCtx); err2 != nil {
			e.log.Warn("river did not stop in time", "err", err2)
		}
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

var errShutdown = errors.New("server shutting down")

func (e *Engine) executor(name string) (Executor, bool) {
	x, ok := e.opts.Executors[name]
	return x, ok
}
