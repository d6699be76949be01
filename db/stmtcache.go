package db

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"regexp"
	"sync/atomic"

	"modernc.org/sqlite"
)

// stmtCacheSize bounds the prepared statements kept per connection.
const stmtCacheSize = 256

// cachingConnector opens modernc.org/sqlite connections that keep their
// prepared statements. database/sql prepares every query it is given as
// text afresh, and for SQLite parsing was 40% of an iteration's CPU (River's
// queries and ours alike); reusing the statement skips it. Connections
// implement no QueryerContext/ExecerContext, so database/sql always goes
// through PrepareContext, which answers from the cache.
type cachingConnector struct {
	dsn string
	drv *sqlite.Driver
	// queries counts the statements run on the connector's connections,
	// prepares the statements they had to prepare (not in the cache).
	queries  atomic.Int64
	prepares atomic.Int64
}

// boundLimit matches a LIMIT whose value is a bound parameter.
var boundLimit = regexp.MustCompile(`(?i)\b(LIMIT\s+)([?@:$][A-Za-z0-9_]*)`)

// unfoldLimits writes a LIMIT given by a parameter as a unary plus of it.
// SQLite compiles a bound LIMIT's value into the statement and marks the
// statement to be prepared again whenever the parameter is bound, and
// database/sql binds every execution: each run of such a statement (River's
// fetch, every paged read) parsed and planned it afresh, doubling its cost.
// SQLite looks through a unary plus only for a literal, so with one the
// value is read when the statement runs, as any expression's is.
func unfoldLimits(query string) string {
	return boundLimit.ReplaceAllString(query, "${1}+${2}")
}

func (c *cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &cachingConn{inner: conn, lru: list.New(), byQuery: map[string]*list.Element{}, queries: &c.queries, prepares: &c.prepares}, nil
}

func (c *cachingConnector) Driver() driver.Driver { return c.drv }

// cachingConn wraps one SQLite connection. database/sql uses a connection
// from one goroutine at a time, so it needs no lock.
type cachingConn struct {
	inner    driver.Conn
	lru      *list.List // of *cachedStmt, most recent first
	byQuery  map[string]*list.Element
	queries  *atomic.Int64
	prepares *atomic.Int64
}

type cachedStmt struct {
	driver.Stmt
	conn  *cachingConn
	query string
	inUse bool
}

// Close marks the statement free for reuse; the real statement is closed
// when it leaves the cache or the connection closes.
func (s *cachedStmt) Close() error {
	s.inUse = false
	return nil
}

func (s *cachedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.conn.queries.Add(1)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *cachedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.conn.queries.Add(1)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (c *cachingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if el, ok := c.byQuery[query]; ok {
		s := el.Value.(*cachedStmt)
		if !s.inUse {
			s.inUse = true
			c.lru.MoveToFront(el)
			return s, nil
		}
		// In use by open rows of the same query: prepare a one-off.
		c.prepares.Add(1)
		return c.inner.(driver.ConnPrepareContext).PrepareContext(ctx, unfoldLimits(query))
	}
	c.prepares.Add(1)
	st, err := c.inner.(driver.ConnPrepareContext).PrepareContext(ctx, unfoldLimits(query))
	if err != nil {
		return nil, err
	}
	s := &cachedStmt{Stmt: st, conn: c, query: query, inUse: true}
	c.byQuery[query] = c.lru.PushFront(s)
	for c.lru.Len() > stmtCacheSize {
		el := c.lru.Back()
		old := el.Value.(*cachedStmt)
		if old.inUse {
			break
		}
		c.lru.Remove(el)
		delete(c.byQuery, old.query)
		old.Stmt.Close()
	}
	return s, nil
}

func (c *cachingConn) Close() error {
	var errs []error
	for el := c.lru.Front(); el != nil; el = el.Next() {
		errs = append(errs, el.Value.(*cachedStmt).Stmt.Close())
	}
	c.lru.Init()
	c.byQuery = map[string]*list.Element{}
	errs = append(errs, c.inner.Close())
	return errors.Join(errs...)
}

func (c *cachingConn) Begin() (driver.Tx, error) { //nolint:staticcheck // required by driver.Conn
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.inner.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *cachingConn) Ping(ctx context.Context) error {
	return c.inner.(driver.Pinger).Ping(ctx)
}

func (c *cachingConn) ResetSession(ctx context.Context) error {
	return c.inner.(driver.SessionResetter).ResetSession(ctx)
}

func (c *cachingConn) IsValid() bool {
	return c.inner.(driver.Validator).IsValid()
}

// ReadQueries returns how many statements the reader pool has run, for
// measuring what a page or a request costs.
func (d *DB) ReadQueries() int64 {
	if d.readConn == nil {
		return 0
	}
	return d.readConn.queries.Load()
}
