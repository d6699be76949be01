package sqlstore

import (
	"context"
	"fmt"
	"homework/engine/spec"
)

// InsertRunTags records the run's tags for filtering and grouping. The tags
// are already validated (engine.NormalizeTags).
func (tx *Tx) InsertRunTags(ctx context.Context, runID string, userID int64, tags []string) error {
	for _, t := range tags {
		if _, err := tx.c.Exec(ctx, `INSERT INTO run_tags (run_id, user_id, tag) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, runID, userID, t); err != nil {
			return fmt.Errorf("insert run tag: %w", err)
		}
	}
	return nil
}

// ListUserTags returns every tag on the user's runs with its run count,
// most used first.
func (r Reads) ListUserTags(ctx context.Context, userID int64) ([]spec.TagCount, error) {
	rows, err := r.c.Query(ctx, `SELECT tag, COUNT(*) FROM run_tags WHERE user_id = ?
		GROUP BY tag ORDER BY COUNT(*) DESC, tag LIMIT 200`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spec.TagCount
	for rows.Next() {
		var t spec.TagCount
		if err := rows.Scan(&t.Tag, &t.Runs); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
