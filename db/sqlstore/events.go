package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"homework/engine/spec"
)

// MarshalEventData returns an event's data as JSON: {} for nil or empty.
func MarshalEventData(data any) (json.RawMessage, error) {
	switch v := data.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		if len(v) == 0 {
			return json.RawMessage(`{}`), nil
		}
		return v, nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("marshal event data: %w", err)
		}
		return b, nil
	}
}

// EventColumns are an event row's columns, in ScanEvents' order.
const EventColumns = `id, run_id, user_id, seq, type, data, created_at`

// ScanEvents reads every event of rows and closes them.
func ScanEvents(rows Rows, err error) ([]*spec.Event, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.Event
	for rows.Next() {
		var e spec.Event
		var data string
		var created int64
		if err := rows.Scan(&e.ID, &e.RunID, &e.UserID, &e.Seq, &e.Type, &data, &created); err != nil {
			return nil, err
		}
		e.Data = json.RawMessage(data)
		e.CreatedAt = msTime(created)
		out = append(out, &e)
	}
	return out, rows.Err()
}

// ListRunEvents returns up to limit events of the user's run with seq >
// afterSeq, in seq order. Another user's run is ENOTFOUND.
func (r Reads) ListRunEvents(ctx context.Context, userID int64, runID string, afterSeq int64, limit int) ([]*spec.Event, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1000
	}
	return ScanEvents(r.c.Query(ctx, `SELECT `+EventColumns+` FROM events
		WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, runID, afterSeq, limit))
}

// ListRunEventsByType returns the run's events of the given types in seq
// order, for building views without replaying everything. The caller must
// have checked ownership.
func (r Reads) ListRunEventsByType(ctx context.Context, runID string, types ...string) ([]*spec.Event, error) {
	if len(types) == 0 {
		return nil, nil
	}
	args := []any{runID}
	for _, t := range types {
		args = append(args, t)
	}
	return ScanEvents(r.c.Query(ctx, `SELECT `+EventColumns+` FROM events
		WHERE run_id = ? AND type IN (`+placeholders(len(types))+`) ORDER BY seq`, args...))
}

// ListUserEvents returns up to limit events of all the user's runs with id >
// afterID, in id order (the dashboard feed).
func (r Reads) ListUserEvents(ctx context.Context, userID, afterID int64, limit int) ([]*spec.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	return ScanEvents(r.c.Query(ctx, `SELECT `+EventColumns+` FROM events
		WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?`, userID, afterID, limit))
}

// LastSeq returns the highest seq of the run's events (0 when none).
func (r Reads) LastSeq(ctx context.Context, runID string) (int64, error) {
	var n sql.NullInt64
	err := r.c.QueryRow(ctx, `SELECT MAX(seq) FROM events WHERE run_id = ?`, runID).Scan(&n)
	return n.Int64, err
}

// LastUserEventID returns the id of the newest event of the user's runs, or
// 0. Pages start the dashboard feed after it.
func (r Reads) LastUserEventID(ctx context.Context, userID int64) (int64, error) {
	var id int64
	err := r.c.QueryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM events WHERE user_id = ?`, userID).Scan(&id)
	return id, err
}

// ActionPredicate is the predicate of the partial index events_run_actions
// (SQLite's migration 0032), verbatim: SQLite uses a partial index only for
// a query that repeats its predicate. It names spec.ActionEventTypes.
var ActionPredicate = func() string {
	var or []string
	for _, t := range spec.ActionEventTypes {
		or = append(or, "type = '"+string(t)+"'")
	}
	return strings.Join(or, " OR ")
}()

// ListRunActions returns the run's action events (spec.ActionEventTypes)
// created at or after since, in order, at most 2,000. The caller must have
// checked ownership.
func (r Reads) ListRunActions(ctx context.Context, runID string, since time.Time) ([]*spec.Event, error) {
	return ScanEvents(r.c.Query(ctx, `SELECT `+EventColumns+` FROM events
		WHERE run_id = ? AND (`+ActionPredicate+`) AND created_at >= ? ORDER BY seq LIMIT 2000`, runID, since.UnixMilli()))
}

// ListRunEventsBefore returns up to limit of the user's run's events with
// seq below beforeSeq (any seq when beforeSeq <= 0), newest first, only
// those of type typ when typ is not "": the run page's event history,
// paged back by seq. Another user's run is ENOTFOUND.
func (r Reads) ListRunEventsBefore(ctx context.Context, userID int64, runID, typ string, beforeSeq int64, limit int) ([]*spec.Event, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	if beforeSeq <= 0 {
		beforeSeq = math.MaxInt64
	}
	q, args := `SELECT `+EventColumns+` FROM events WHERE run_id = ? AND seq < ?`, []any{runID, beforeSeq}
	if typ != "" {
		q, args = q+` AND type = ?`, append(args, typ)
	}
	return ScanEvents(r.c.Query(ctx, q+` ORDER BY seq DESC LIMIT ?`, append(args, limit)...))
}

// eventTypesScan is how many of a run's newest events ListRunEventTypes
// reads.
const eventTypesScan = 5000

// ListRunEventTypes returns the types of the user's run's newest events,
// each once, in name order. Another user's run is ENOTFOUND.
func (r Reads) ListRunEventTypes(ctx context.Context, userID int64, runID string) ([]string, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	// The types among the run's newest eventTypesScan events: bounded, by
	// the (run_id, seq) index, however long the run (a type only older
	// events have can still be typed into the filter).
	rows, err := r.c.Query(ctx, `SELECT DISTINCT type FROM (SELECT type FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT ?) t ORDER BY type`, runID, eventTypesScan)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
