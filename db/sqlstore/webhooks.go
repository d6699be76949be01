package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"homework/engine/spec"
)

const webhookCols = `id, user_id, url, events, format, secret, created_at, disabled_at`

func scanWebhook(row Row) (*spec.WebhookEndpoint, error) {
	var e spec.WebhookEndpoint
	var events string
	var created int64
	var disabled sql.NullInt64
	if err := row.Scan(&e.ID, &e.UserID, &e.URL, &events, &e.Format, &e.Secret, &created, &disabled); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, spec.Errorf(spec.ENOTFOUND, "Webhook not found.")
		}
		return nil, err
	}
	if err := json.Unmarshal([]byte(events), &e.Events); err != nil {
		return nil, err
	}
	e.CreatedAt, e.DisabledAt = msTime(created), fromMS(disabled)
	return &e, nil
}

// CreateWebhook stores a new endpoint of e.UserID.
func (s Store) CreateWebhook(ctx context.Context, e *spec.WebhookEndpoint) error {
	events, err := json.Marshal(e.Events)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(tx *Tx) error {
		e.CreatedAt = tx.now
		return tx.c.QueryRow(ctx, `INSERT INTO webhook_endpoints (user_id, url, events, format, secret, created_at)
			VALUES (?,?,?,?,?,?) RETURNING id`, e.UserID, e.URL, string(events), e.Format, e.Secret, tx.now.UnixMilli()).Scan(&e.ID)
	})
	if s.d.IsForeignKeyViolation(err) {
		return spec.Errorf(spec.ENOTFOUND, "User not found.")
	}
	return err
}

// FindWebhook returns one of the user's endpoints, or ENOTFOUND.
func (r Reads) FindWebhook(ctx context.Context, userID, id int64) (*spec.WebhookEndpoint, error) {
	return scanWebhook(r.c.QueryRow(ctx, `SELECT `+webhookCols+` FROM webhook_endpoints WHERE id = ? AND user_id = ?`, id, userID))
}

// ListWebhooks returns the user's endpoints, newest first.
func (r Reads) ListWebhooks(ctx context.Context, userID int64) ([]*spec.WebhookEndpoint, error) {
	return queryWebhooks(ctx, r.c, `SELECT `+webhookCols+` FROM webhook_endpoints WHERE user_id = ? ORDER BY id DESC`, userID)
}

func queryWebhooks(ctx context.Context, c Conn, q string, args ...any) ([]*spec.WebhookEndpoint, error) {
	rows, err := c.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.WebhookEndpoint
	for rows.Next() {
		e, err := scanWebhook(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// DeleteWebhook deletes one of the user's endpoints and its deliveries.
func (s Store) DeleteWebhook(ctx context.Context, userID, id int64) error {
	return s.write(ctx, func(tx *Tx) error {
		if _, err := tx.c.Exec(ctx, `DELETE FROM webhook_deliveries WHERE endpoint_id = ? AND user_id = ?`, id, userID); err != nil {
			return err
		}
		n, err := tx.c.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = ? AND user_id = ?`, id, userID)
		if err != nil {
			return err
		}
		if n == 0 {
			return spec.Errorf(spec.ENOTFOUND, "Webhook not found.")
		}
		return nil
	})
}

// WebhooksFor returns the user's enabled endpoints subscribed to event,
// oldest first.
func (tx *Tx) WebhooksFor(ctx context.Context, userID int64, event string) ([]*spec.WebhookEndpoint, error) {
	all, err := queryWebhooks(ctx, tx.c, `SELECT `+webhookCols+` FROM webhook_endpoints
		WHERE user_id = ? AND disabled_at IS NULL ORDER BY id`, userID)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, e := range all {
		if e.Subscribes(event) {
			out = append(out, e)
		}
	}
	return out, nil
}

const deliveryCols = `id, endpoint_id, user_id, run_id, event, webhook_id, body, state, attempts, generation,
	last_status, last_error, last_response, next_attempt_at, created_at, updated_at`

func scanDelivery(row Row) (*spec.WebhookDelivery, error) {
	var d spec.WebhookDelivery
	var runID sql.NullString
	var body string
	var next sql.NullInt64
	var created, updated int64
	if err := row.Scan(&d.ID, &d.EndpointID, &d.UserID, &runID, &d.Event, &d.WebhookID, &body, &d.State, &d.Attempts,
		&d.Generation, &d.LastStatus, &d.LastError, &d.LastResponse, &next, &created, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, spec.Errorf(spec.ENOTFOUND, "Delivery not found.")
		}
		return nil, err
	}
	d.RunID, d.Body = runID.String, []byte(body)
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMS(next), msTime(created), msTime(updated)
	return &d, nil
}

// InsertWebhookDelivery stores a new delivery.
func (tx *Tx) InsertWebhookDelivery(ctx context.Context, d *spec.WebhookDelivery) error {
	d.CreatedAt, d.UpdatedAt = tx.now, tx.now
	if d.Generation == 0 {
		d.Generation = 1
	}
	if d.State == "" {
		d.State = spec.DeliveryPending
	}
	return tx.c.QueryRow(ctx, `INSERT INTO webhook_deliveries (endpoint_id, user_id, run_id, event, webhook_id, body, state,
		attempts, generation, next_attempt_at, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id`,
		d.EndpointID, d.UserID, nullString(d.RunID), d.Event, d.WebhookID, string(d.Body), d.State, d.Attempts, d.Generation,
		ms(d.NextAttemptAt), tx.now.UnixMilli(), tx.now.UnixMilli()).Scan(&d.ID)
}

// FindUserWebhookDelivery returns one of the user's deliveries of the
// endpoint, or ENOTFOUND.
func (tx *Tx) FindUserWebhookDelivery(ctx context.Context, userID, endpointID, id int64) (*spec.WebhookDelivery, error) {
	return scanDelivery(tx.c.QueryRow(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries
		WHERE id = ? AND endpoint_id = ? AND user_id = ?`+tx.d.ForUpdate, id, endpointID, userID))
}

// UpdateWebhookDelivery records a delivery's state, attempts, last
// outcome, next attempt and generation.
func (tx *Tx) UpdateWebhookDelivery(ctx context.Context, d *spec.WebhookDelivery) error {
	d.UpdatedAt = tx.now
	n, err := tx.c.Exec(ctx, `UPDATE webhook_deliveries SET state = ?, attempts = ?, generation = ?, last_status = ?, last_error = ?,
		last_response = ?, next_attempt_at = ?, updated_at = ? WHERE id = ?`, d.State, d.Attempts, d.Generation, d.LastStatus,
		d.LastError, d.LastResponse, ms(d.NextAttemptAt), tx.now.UnixMilli(), d.ID)
	if err != nil {
		return err
	}
	if n == 0 {
		return spec.Errorf(spec.ENOTFOUND, "Delivery not found.")
	}
	return nil
}

// FindWebhookDelivery returns a delivery and its endpoint whoever owns
// them.
func (r Reads) FindWebhookDelivery(ctx context.Context, id int64) (*spec.WebhookDelivery, *spec.WebhookEndpoint, error) {
	d, err := scanDelivery(r.c.QueryRow(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE id = ?`, id))
	if err != nil {
		return nil, nil, err
	}
	e, err := r.FindWebhook(ctx, d.UserID, d.EndpointID)
	if err != nil {
		return nil, nil, err
	}
	return d, e, nil
}

// ListWebhookDeliveries returns up to limit of the deliveries of one of the
// user's endpoints, newest first.
func (r Reads) ListWebhookDeliveries(ctx context.Context, userID, endpointID int64, limit int) ([]*spec.WebhookDelivery, error) {
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	if _, err := r.FindWebhook(ctx, userID, endpointID); err != nil {
		return nil, err
	}
	rows, err := r.c.Query(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE endpoint_id = ? AND user_id = ?
		ORDER BY id DESC LIMIT ?`, endpointID, userID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.WebhookDelivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// WebhookFailingSince returns when the oldest of the endpoint's failed
// deliveries since its last delivered one was created.
func (tx *Tx) WebhookFailingSince(ctx context.Context, endpointID int64) (time.Time, error) {
	var since sql.NullInt64
	err := tx.c.QueryRow(ctx, `SELECT MIN(created_at) FROM webhook_deliveries WHERE endpoint_id = ?1 AND state = 'failed'
		AND id > COALESCE((SELECT MAX(id) FROM webhook_deliveries WHERE endpoint_id = ?1 AND state = 'delivered'), 0)`,
		endpointID).Scan(&since)
	return fromMS(since), err
}

// DisableWebhook disables an endpoint.
func (tx *Tx) DisableWebhook(ctx context.Context, endpointID int64) error {
	_, err := tx.c.Exec(ctx, `UPDATE webhook_endpoints SET disabled_at = ? WHERE id = ? AND disabled_at IS NULL`,
		tx.now.UnixMilli(), endpointID)
	return err
}
