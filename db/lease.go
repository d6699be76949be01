package db

import (
	"context"
	"time"
)

// RenewAttemptLease extends the lease of a running run held by owner while
// (iteration, attempt) is still the run's current attempt. It reports false
// when the run moved on (recovered, canceled, finished): an attempt that is
// not current never extends the lease of the one that replaced it.
func (d *DB) RenewAttemptLease(ctx context.Context, runID, owner string, iteration, attempt int, until time.Time) (bool, error) {
	var ok bool
	err := d.WriteTx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE runs SET lease_until = ? WHERE id = ? AND lease_owner = ? AND status = 'running'
			AND iteration = ? AND attempt = ?`, until.UnixMilli(), runID, owner, iteration, attempt)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		ok = n == 1
		return nil
	})
	return ok, err
}
