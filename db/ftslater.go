package db

import (
	"context"
	"sync"
	"time"

	"homework/engine/spec"
)

// Iteration summaries are indexed for full-text search later than they are
// written (migration 0037): their rowids wait in documents_fts_pending
// until the 32nd, whose insert indexes them all in one FTS5 segment. What
// waits is indexed before the store searches (SearchDocuments, ListRuns
// with a query), so a search through the store finds every document
// committed before it, and by a goroutine shortly after the commits that
// wrote it, which bounds how long a search that bypasses the store (a
// ListRuns query in a ReadTx) may miss a summary to about ftsLaterDelay.

// ftsLaterDelay is how long after a commit the goroutine indexes what
// waits, at most once per delay.
const ftsLaterDelay = time.Second

// indexPendingSQL indexes the documents that wait and empties the queue. A
// document already in the index (documents_fts_docsize has a row for each)
// is not added again.
const indexPendingSQL = `INSERT INTO documents_fts(rowid, title, description, content)
	SELECT d.rowid, d.title, d.description, d.content
	FROM documents_fts_pending p JOIN documents d ON d.rowid = p.rowid
	WHERE NOT EXISTS (SELECT 1 FROM documents_fts_docsize s WHERE s.id = p.rowid)`

// PutDocument puts doc (see sqlstore) and notes an iteration summary it
// creates, whose indexing waits, for the goroutine to index after commit.
func (tx *Tx) PutDocument(ctx context.Context, doc *spec.Document) (bool, error) {
	created, err := tx.Tx.PutDocument(ctx, doc)
	if err == nil && created && doc.Kind == spec.DocSummary {
		tx.indexLater = true
	}
	return created, err
}

// pendingSearch reports whether documents wait to be indexed.
func (d *DB) pendingSearch(ctx context.Context) (bool, error) {
	var n int
	err := d.reader.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM documents_fts_pending)`).Scan(&n)
	return n != 0, err
}

// IndexPending indexes the documents that wait for the full-text index, in
// one write transaction; none when nothing waits. It must not be called
// inside a write transaction of the store.
func (d *DB) IndexPending(ctx context.Context) error {
	if ok, err := d.pendingSearch(ctx); err != nil || !ok {
		return err
	}
	return d.indexPending(ctx)
}

// indexPending indexes what waits in one write transaction.
func (d *DB) indexPending(ctx context.Context) error {
	return d.write(ctx, func(tx *Tx) error {
		if _, err := tx.Conn().Exec(ctx, indexPendingSQL); err != nil {
			return err
		}
		_, err := tx.Conn().Exec(ctx, `DELETE FROM documents_fts_pending`)
		return err
	})
}

// SearchDocuments indexes what waits, then searches (see sqlstore).
// Indexing needs the writer: when it cannot have it (busy past the
// timeout, a full disk), the search finds what is indexed rather than fail.
func (d *DB) SearchDocuments(ctx context.Context, userID int64, runID, query string, limit int) ([]spec.SearchHit, error) {
	d.IndexPending(ctx)
	return d.Store.SearchDocuments(ctx, userID, runID, query, limit)
}

// ListRuns indexes what waits when f has a query, which matches documents
// too, then lists (see sqlstore), as SearchDocuments does.
func (d *DB) ListRuns(ctx context.Context, userID int64, f spec.RunFilter) (*spec.RunPage, error) {
	if f.Query != "" {
		d.IndexPending(ctx)
	}
	return d.Store.ListRuns(ctx, userID, f)
}

// ftsLater indexes what waits shortly after the commits that queued it,
// off their write path. It is told only of this process's commits; what
// another process queues (SharedWriters) is indexed by that process or by
// the next search.
type ftsLater struct {
	d    *DB
	kick chan struct{}
	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

func newFTSLater(d *DB) *ftsLater {
	f := &ftsLater{d: d, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	f.done.Add(1)
	go f.loop()
	return f
}

// queued tells the goroutine a commit queued a document. It never blocks.
func (f *ftsLater) queued() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *ftsLater) loop() {
	defer f.done.Done()
	for {
		select {
		case <-f.stop:
			return
		case <-f.kick:
		}
		select {
		case <-f.stop:
			return
		case <-time.After(ftsLaterDelay):
		}
		// Nothing may wait any more (the batch trigger indexed it): then
		// the transaction writes nothing. A failure (the store unavailable
		// for a while) is retried after the next summary; a search indexes
		// what waits itself.
		f.d.indexPending(context.Background())
	}
}

// close stops the goroutine. It may be called more than once.
func (f *ftsLater) close() {
	f.once.Do(func() {
		close(f.stop)
		f.done.Wait()
	})
}
