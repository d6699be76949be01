package spec

import (
	"context"
	"errors"
	"time"
)

// This file is the store contract: everything a Homework store must do,
// stated once. The SQLite store (package db) and the PostgreSQL store
// (package db/pg) implement it over the shared SQL of db/sqlstore; one
// conformance suite (db/storetest) runs against both. The engine and the
// handlers work through it and never name a store.
//
// Every method that takes a user id returns only that user's objects:
// another user's run, document or notification is ENOTFOUND, never a
// different error. Times are the store's clock (Now), stamped once per
// transaction.
//
// Events reach subscribers from the store, not from the code that appends
// them: a store is opened with a Publish function, the engine's Relay
// (engine/relay.go), and calls it with every transaction's events after
// that transaction commits, in commit order. The SQLite store calls it in
// the committing goroutine; the PostgreSQL store from its one LISTEN
// connection, for the events of every process, this one's included. The
// Relay logs each run's lifecycle and publishes to the bus; nothing else
// publishes events.

// Store is a Homework store.
type Store interface {
	// Now is the store's clock, the one its rows are stamped with.
	Now() time.Time
	// Ping reports whether the store answers (readiness).
	Ping(ctx context.Context) error
	// Unavailable reports whether err means the database could not be
	// reached or used for a while (an outage), as opposed to a fault of
	// the statement.
	Unavailable(err error) bool
	Close() error

	// ReadStore's methods read from whichever connection is free, each
	// statement its own moment; ReadTx runs fn with reads that all see one
	// snapshot. A page view reads through ReadTx only.
	ReadStore
	ReadTxer
	// WriteTx runs fn in one write transaction, committing when fn returns
	// nil and rolling back otherwise; the transaction's events are
	// published after it commits.
	WriteTx(ctx context.Context, fn func(tx Tx) error) error
	// AppendEvent appends a non-state event (tool calls, output) in a
	// transaction of its own; concurrent appends may be group-committed.
	AppendEvent(ctx context.Context, runID string, typ EventType, data any) (*Event, error)

	Accounts
	EngineReads
	RunReads
	Webhooks
}

// GroupWriter is implemented by a Store whose small writes that must commit
// at once can share their commit with concurrent ones (the SQLite store's
// group commit, which also carries AppendEvent). The engine records model
// calls through it when the store has it, and through WriteTx otherwise.
type GroupWriter interface {
	// GroupWriteTx runs fn in a write transaction, possibly shared with
	// other callers' writes and event appends, and returns once it
	// committed; its events are published after it commits, as WriteTx's.
	// When the shared transaction fails, fn runs again alone and its error
	// is returned: fn may run twice, and must keep nothing from a run but
	// what it wrote in tx.
	GroupWriteTx(ctx context.Context, fn func(tx Tx) error) error
}

// SlotChecker is implemented by a write transaction whose store lets
// concurrent transactions promote runs (PostgreSQL: several processes), and
// which can check a user's run slots in its commit. A run's creation then
// starts the run without holding the user's slot lock from its promotion's
// read to its commit, through the transaction's round trips and the work
// between them, as promoting does (LockedStartable): the lock is taken, and
// the slots checked, in the round trip that commits, so the user's other
// creations, in every process, wait for one round trip of the database's
// instead of several of this process's.
type SlotChecker interface {
	// FreeSlot reports, without locking the user's slots, whether the user
	// has fewer than max running runs and no queued run but except.
	FreeSlot(ctx context.Context, userID int64, max int, except string) (bool, error)
	// CheckSlotAtCommit makes the transaction lock the user's slots before
	// it commits and then fail with ErrNoFreeSlot unless the user has at
	// most max running runs (the ones it started among them) and no queued
	// run.
	CheckSlotAtCommit(ctx context.Context, userID int64, max int) error
}

// ErrNoFreeSlot fails a transaction that started a run in a slot that was
// free when it looked (SlotChecker) and taken by its commit.
var ErrNoFreeSlot = errors.New("the user's free run slot was taken before the commit")

// SearchIndexer is implemented by a store that indexes some documents for
// full-text search later than it writes them (the SQLite store's iteration
// summaries). IndexPending indexes what waits, so that a search made after
// it finds every document committed before it. The store's own searches
// (SearchDocuments, ListRuns with a query) do so first; a caller that
// searches inside a ReadTx calls it before.
type SearchIndexer interface {
	IndexPending(ctx context.Context) error
}

// Webhooks are a user's webhook endpoints and their deliveries (the
// listing reads are ReadStore's).
type Webhooks interface {
	// CreateWebhook stores a new endpoint of e.UserID (URL, events, format
	// and secret set by the caller) and sets its id and time.
	CreateWebhook(ctx context.Context, e *WebhookEndpoint) error
	// FindWebhook returns one of the user's endpoints, or ENOTFOUND.
	FindWebhook(ctx context.Context, userID, id int64) (*WebhookEndpoint, error)
	// DeleteWebhook deletes one of the user's endpoints and its
	// deliveries, or returns ENOTFOUND.
	DeleteWebhook(ctx context.Context, userID, id int64) error
	// FindWebhookDelivery returns a delivery and its endpoint whoever owns
	// them (engine use only), or ENOTFOUND.
	FindWebhookDelivery(ctx context.Context, id int64) (*WebhookDelivery, *WebhookEndpoint, error)
}

// Accounts are users, browser sessions and API tokens. Secrets are stored
// hashed only (HashToken).
type Accounts interface {
	CountUsers(ctx context.Context) (int, error)
	// CreateUser stores a new account; a taken email is ECONFLICT.
	CreateUser(ctx context.Context, email, passwordHash string, admin bool) (*User, error)
	// CreateFirstUser creates an admin account only when there is none
	// yet; otherwise ECONFLICT.
	CreateFirstUser(ctx context.Context, email, passwordHash string) (*User, error)
	FindUserByEmail(ctx context.Context, email string) (*User, error)
	FindUserByID(ctx context.Context, id int64) (*User, error)
	ListUsers(ctx context.Context) ([]*User, error)
	// SetPassword replaces the password hash and signs out the account's
	// browser sessions.
	SetPassword(ctx context.Context, email, passwordHash string) (*User, error)

	// CreateAPIToken returns the new token's secret, shown once.
	CreateAPIToken(ctx context.Context, userID int64, name string) (string, *APIToken, error)
	RevokeAPIToken(ctx context.Context, userID, tokenID int64) error
	// FindUserByToken returns an unrevoked token's user, or EUNAUTHORIZED.
	FindUserByToken(ctx context.Context, secret string) (*User, error)
	CreateSession(ctx context.Context, userID int64, ttl time.Duration) (string, *Session, error)
	// FindSession returns an unexpired session and its user, or
	// EUNAUTHORIZED.
	FindSession(ctx context.Context, secret string) (*Session, *User, error)
	DeleteSession(ctx context.Context, secret string) error
	// LiveCredentials reports, in one query, which API tokens (by the hash
	// of their secret: present, unrevoked) and sessions (by the hash of
	// theirs: present, unexpired) still authenticate. Open event streams
	// re-check their credentials with it.
	LiveCredentials(ctx context.Context, tokenHashes, sessionHashes []string) (tokens, sessions map[string]bool, err error)
}

// EngineReads are what the engine reads and renews outside a transaction.
type EngineReads interface {
	// FindRunByID returns the run whoever owns it (engine use only).
	FindRunByID(ctx context.Context, id string) (*Run, error)
	CountAllRunsByStatus(ctx context.Context) (map[string]int, error)
	// QueueDepth is how many iterate jobs wait to be worked.
	QueueDepth(ctx context.Context) (int, error)
	// RunningRuns lists every running run's lease, for recovery.
	RunningRuns(ctx context.Context) ([]RunLease, error)
	// RenewAttemptLease extends owner's lease only while (iteration,
	// attempt) is still the run's current attempt; false otherwise.
	RenewAttemptLease(ctx context.Context, runID, owner string, iteration, attempt int, until time.Time) (bool, error)
	// SumLLMCalls returns the usage of the run's model calls in iteration.
	SumLLMCalls(ctx context.Context, runID string, iteration int) (Metrics, error)
	// PastIterations returns the run's last n finished iterations numbered
	// below before, newest first, as an iteration starting is given them:
	// summaries and gate records, and the check results of the newest only,
	// as stored JSON. An iteration reads them, and its inbox, before its
	// write transaction: finished iterations do not change, and the inbox
	// items it reads are the ones it consumes.
	PastIterations(ctx context.Context, runID string, before, n int) ([]*PastIteration, error)
	// PendingInbox returns the run's unconsumed inbox items, oldest first.
	PendingInbox(ctx context.Context, runID string) ([]*InboxItem, error)
}

// RunReads are reads of one user's runs beyond a page view's.
type RunReads interface {
	FindRunDocumentByPath(ctx context.Context, userID int64, runID, path string) (*Document, error)
	// SearchDocuments runs a full-text query over the user's documents, all
	// runs when runID is empty, best first.
	SearchDocuments(ctx context.Context, userID int64, runID, query string, limit int) ([]SearchHit, error)
	// SearchTranscripts returns lines of the run's transcripts whose text
	// contains q (case-insensitive), oldest first.
	SearchTranscripts(ctx context.Context, userID int64, runID, q string, limit int) ([]*TranscriptLine, error)
	// ListUserEvents returns the user's events after afterID in id order
	// (the dashboard feed). It returns no event while one with a smaller id
	// may still commit (SQLite: its one writer commits ids in order;
	// PostgreSQL: it reads up to the feed horizon), and the bus gets events
	// in id order, so following the feed by id skips nothing.
	ListUserEvents(ctx context.Context, userID, afterID int64, limit int) ([]*Event, error)
	ListLLMCalls(ctx context.Context, userID int64, runID string) ([]*LLMCall, error)
	ListInbox(ctx context.Context, userID int64, runID string) ([]*InboxItem, error)
	// MarkNotificationRead marks one notification read, or all (id 0).
	MarkNotificationRead(ctx context.Context, userID, id int64) error
	// MarkRunNotificationsRead marks every notification of the run read
	// and returns how many changed.
	MarkRunNotificationsRead(ctx context.Context, userID int64, runID string) (int, error)
}

// UsageReads are what a forecast of a run's next iteration reads; a write
// transaction and a read snapshot both have them.
type UsageReads interface {
	// RecentUsage returns what the run's last n finished (succeeded or
	// failed) iterations spent, newest first.
	RecentUsage(ctx context.Context, runID string, n int) ([]IterationUsage, error)
	// FirstIterationUsage returns what the first iterations of the user's
	// last n other runs with this executor and configured model ("" for
	// the server's default) spent, newest run first.
	FirstIterationUsage(ctx context.Context, userID int64, executor, model, exceptRunID string, n int) ([]IterationUsage, error)
}

// Tx is one write transaction: every state change of a run happens in one,
// together with the events that record it and the job that works its next
// iteration. Events appended in a transaction are published after it
// commits, never before. A write may be sent with the transaction's next
// statement (a store that pays a round trip per statement holds back the
// writes nothing is read from: UpdateRun, SetRunMetrics, UpsertIteration,
// InsertLLMCall, transcript lines): its failure is then that statement's
// error, or the commit's, and the transaction fails with it either way.
type Tx interface {
	// Now is the transaction's time, stamped once.
	Now() time.Time
	AppendEvent(ctx context.Context, runID string, typ EventType, data any) (*Event, error)

	InsertRun(ctx context.Context, r *Run) error
	// InsertRunTags records a new run's tags (already normalized).
	InsertRunTags(ctx context.Context, runID string, userID int64, tags []string) error
	// FindRun returns the run whoever owns it; where several processes
	// write, it locks the run for the rest of the transaction.
	FindRun(ctx context.Context, id string) (*Run, error)
	UpdateRun(ctx context.Context, r *Run) error
	SetRunMetrics(ctx context.Context, r *Run) error
	SetLease(ctx context.Context, r *Run, owner string, until time.Time) error
	// LockedRunningCount and LockedStartable serve slot promotion. Each
	// locks the user's slots for the rest of the transaction (where
	// transactions run concurrently); then the first counts the runs
	// holding one, and the second reads the user's oldest queued runs, as
	// many as there are free slots out of max.
	LockedRunningCount(ctx context.Context, userID int64) (int, error)
	LockedStartable(ctx context.Context, userID int64, max int) ([]*Run, error)

	FindIteration(ctx context.Context, runID string, iteration int) (*Iteration, error)
	UpsertIteration(ctx context.Context, it *Iteration) error
	RecentIterations(ctx context.Context, runID string, n int) ([]*Iteration, error)
	// SumIterationMetrics adds up the recorded iterations' metrics of a run.
	SumIterationMetrics(ctx context.Context, runID string) (Metrics, error)
	// SumIterationMetricsFrom adds up the metrics of the run's iterations
	// numbered from on, in two parts: those numbered below below (settled)
	// and the others (rest).
	SumIterationMetricsFrom(ctx context.Context, runID string, from, below int) (settled, rest Metrics, err error)
	UsageReads
	// AppendTranscript appends lines to an iteration's transcript under its
	// cap (CapTranscript) and returns the kept lines and the new info.
	AppendTranscript(ctx context.Context, runID string, iteration int, capBytes int64, lines []*TranscriptLine, dropped int64) ([]*TranscriptLine, *TranscriptInfo, error)

	InsertInbox(ctx context.Context, it *InboxItem) error
	ConsumeInbox(ctx context.Context, runID string, maxID int64, iteration int) error
	// PendingInbox returns the run's unconsumed inbox items as the
	// transaction sees them, oldest first.
	PendingInbox(ctx context.Context, runID string) ([]*InboxItem, error)
	// InsertLLMCall records a model call (its ID is not read back).
	InsertLLMCall(ctx context.Context, c *LLMCall) error
	SumLLMCalls(ctx context.Context, runID string, iteration int) (Metrics, error)
	InsertNotification(ctx context.Context, n *Notification) error
	// ResolveRunNotifications marks the run's open notifications of kind
	// resolved: the run moved on from what they asked of the person.
	ResolveRunNotifications(ctx context.Context, runID, kind string) error

	// WebhooksFor returns the user's enabled endpoints subscribed to
	// event, oldest first.
	WebhooksFor(ctx context.Context, userID int64, event string) ([]*WebhookEndpoint, error)
	// InsertWebhookDelivery stores a new delivery and sets its id and
	// times.
	InsertWebhookDelivery(ctx context.Context, d *WebhookDelivery) error
	// FindUserWebhookDelivery returns one of the user's deliveries of the
	// endpoint, or ENOTFOUND.
	FindUserWebhookDelivery(ctx context.Context, userID, endpointID, id int64) (*WebhookDelivery, error)
	// UpdateWebhookDelivery records a delivery's state, attempts, last
	// outcome, next attempt and generation.
	UpdateWebhookDelivery(ctx context.Context, d *WebhookDelivery) error
	// WebhookFailingSince returns when the oldest of the endpoint's failed
	// deliveries since its last delivered one was created (the zero time
	// when none failed since).
	WebhookFailingSince(ctx context.Context, endpointID int64) (time.Time, error)
	// DisableWebhook disables an endpoint: nothing more is delivered to it.
	DisableWebhook(ctx context.Context, endpointID int64) error

	// The run's workspace and checklist.
	ListRunDocuments(ctx context.Context, runID string) ([]*Document, error)
	FindDocumentByPath(ctx context.Context, runID, path string) (*Document, error)
	// PutDocument inserts the document or updates the one at its path;
	// created is true for an insert.
	PutDocument(ctx context.Context, doc *Document) (created bool, err error)
	ListTasks(ctx context.Context, runID string) ([]*Task, error)
	InsertTask(ctx context.Context, t *Task) error
	UpdateTask(ctx context.Context, t *Task) error
}

// Cluster is what a store shared by several server processes adds
// (PostgreSQL): process liveness, command hosts and cross-process
// interrupts.
type Cluster interface {
	// Heartbeat records that process id is alive at now.
	Heartbeat(ctx context.Context, id string, now time.Time) error
	// LiveProcesses returns the processes whose last heartbeat is after
	// since and whose liveness, where they hold one, is held.
	LiveProcesses(ctx context.Context, since time.Time) (map[string]bool, error)
	// HoldLiveness ties process id's liveness to a database session of its
	// own until ctx ends, telling changed when the session is lost (others
	// may then take this process for dead) and held again. It returns once
	// the liveness is first held.
	HoldLiveness(ctx context.Context, id string, changed func(held bool, err error)) error
	// DeadProcesses returns the processes other than self that hold a
	// running run's lease but whose liveness is gone.
	DeadProcesses(ctx context.Context, self string) (map[string]bool, error)

	// CommandHeartbeat is Heartbeat for a process that serves command runs
	// of host and root through queue.
	CommandHeartbeat(ctx context.Context, id string, now time.Time, host, root, queue string) error
	// LiveCommandQueues returns the command queues a live process serves.
	LiveCommandQueues(ctx context.Context, since time.Time) (map[string]bool, error)
	// HostWaitingRuns returns the runs waiting for their host, by run id,
	// with the queue that serves it.
	HostWaitingRuns(ctx context.Context) (map[string]string, error)

	// Interrupt tells the process working the run's iteration to stop it.
	Interrupt(ctx context.Context, runID string, cause error) error
}

// ClusterTx is the transaction side of Cluster.
type ClusterTx interface {
	// BindRunHost binds a new command run to the host, root and queue of
	// the process that accepted it.
	BindRunHost(ctx context.Context, runID, host, root, queue string) error
	// RunHost returns the host, root and queue the run is bound to ("" when
	// it is not bound).
	RunHost(ctx context.Context, runID string) (host, root, queue string, err error)
	// ProcessLive reports whether process id holds its liveness now.
	ProcessLive(ctx context.Context, id string) (bool, error)
}
