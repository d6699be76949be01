package pg

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"homework/engine/spec"
)

const docCols = `id, run_id, user_id, parent_id, path, kind, title, description, content, tags, iteration, created_at, updated_at`

func scanDocument(s pgx.Row, extra ...any) (*spec.Document, error) {
	var d spec.Document
	var parent *string
	var tags string
	var created, updated int64
	dest := append([]any{&d.ID, &d.RunID, &d.UserID, &parent, &d.Path, &d.Kind, &d.Title, &d.Description, &d.Content,
		&tags, &d.Iteration, &created, &updated}, extra...)
	if err := s.Scan(dest...); err != nil {
		return nil, err
	}
	d.ParentID = deref(parent)
	json.Unmarshal([]byte(tags), &d.Tags)
	d.CreatedAt, d.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &d, nil
}

func scanDocuments(rows pgx.Rows) ([]*spec.Document, error) {
	defer rows.Close()
	var out []*spec.Document
	for rows.Next() {
		d, err := scanDocument(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// PutDocument creates the document at (run, path) or updates its content,
// title, description, tags and iteration. It reports whether it was created.
func (tx *Tx) PutDocument(ctx context.Context, doc *spec.Document) (created bool, err error) {
	existing, err := tx.FindDocumentByPath(ctx, doc.RunID, doc.Path)
	if err != nil && spec.ErrorCode(err) != spec.ENOTFOUND {
		return false, err
	}
	tags, _ := json.Marshal(doc.Tags)
	if doc.Tags == nil {
		tags = []byte("[]")
	}
	if existing != nil {
		doc.ID, doc.UserID, doc.CreatedAt, doc.UpdatedAt = existing.ID, existing.UserID, existing.CreatedAt, tx.now
		if doc.ParentID == "" {
			doc.ParentID = existing.ParentID
		}
		if doc.Kind == "" {
			doc.Kind = existing.Kind
		}
		_, err := tx.Exec(ctx, `UPDATE documents SET parent_id=$1, kind=$2, title=$3, description=$4, content=$5, tags=$6,
			iteration=$7, updated_at=$8 WHERE id=$9`, nullString(doc.ParentID), doc.Kind, doc.Title, doc.Description,
			doc.Content, string(tags), doc.Iteration, tx.now.UnixMilli(), doc.ID)
		return false, err
	}
	if doc.ID == "" {
		doc.ID = uuid.Must(uuid.NewV7()).String()
	}
	if doc.Kind == "" {
		doc.Kind = spec.DocNote
	}
	doc.CreatedAt, doc.UpdatedAt = tx.now, tx.now
	err = tx.QueryRow(ctx, `INSERT INTO documents (`+docCols+`)
		SELECT $1, r.id, r.user_id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10 FROM runs r WHERE r.id = $11 RETURNING user_id`,
		doc.ID, nullString(doc.ParentID), doc.Path, doc.Kind, doc.Title, doc.Description, doc.Content, string(tags),
		doc.Iteration, tx.now.UnixMilli(), doc.RunID).Scan(&doc.UserID)
	if err != nil {
		return false, notFound(err, "Run")
	}
	return true, nil
}

// FindDocumentByPath returns the run's document at path inside tx.
func (tx *Tx) FindDocumentByPath(ctx context.Context, runID, path string) (*spec.Document, error) {
	d, err := scanDocument(tx.QueryRow(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = $1 AND path = $2`, runID, path))
	return d, notFound(err, "Document")
}

// ListRunDocuments returns the run's documents inside tx, by path.
func (tx *Tx) ListRunDocuments(ctx context.Context, runID string) ([]*spec.Document, error) {
	rows, err := tx.Query(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = $1 ORDER BY path`, runID)
	if err != nil {
		return nil, err
	}
	return scanDocuments(rows)
}

// FindDocument returns the user's document. Another user's is ENOTFOUND.
func (d reads) FindDocument(ctx context.Context, userID int64, id string) (*spec.Document, error) {
	doc, err := scanDocument(d.q.QueryRow(ctx, `SELECT `+docCols+` FROM documents WHERE id = $1 AND user_id = $2`, id, userID))
	return doc, notFound(err, "Document")
}

// FindRunDocumentByPath returns the document at path in the user's run.
func (d *DB) FindRunDocumentByPath(ctx context.Context, userID int64, runID, path string) (*spec.Document, error) {
	doc, err := scanDocument(d.pool.QueryRow(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = $1 AND path = $2 AND user_id = $3`,
		runID, path, userID))
	return doc, notFound(err, "Document")
}

// ListRunDocuments returns the documents of the user's run, ordered by path.
func (d reads) ListRunDocuments(ctx context.Context, userID int64, runID string) ([]*spec.Document, error) {
	if err := d.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := d.q.Query(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = $1 ORDER BY path`, runID)
	if err != nil {
		return nil, err
	}
	return scanDocuments(rows)
}

// SearchDocuments runs a full-text query over the user's documents (all runs,
// or one run when runID is set), best matches first. The words of query are
// all required and never query syntax (plainto_tsquery); the documents'
// tsvector column is GIN-indexed.
func (d *DB) SearchDocuments(ctx context.Context, userID int64, runID, query string, limit int) ([]spec.SearchHit, error) {
	words := strings.Fields(query)
	if len(words) == 0 {
		return nil, spec.FieldError("q", "Search query is empty.")
	}
	if len(words) > 16 {
		words = words[:16]
	}
	if limit <= 0 || limit > 100 {
		limit = 20
	}
	var a args
	q := a.add(strings.Join(words, " "))
	where := "d.user_id = " + a.add(userID)
	if runID != "" {
		where += " AND d.run_id = " + a.add(runID)
	}
	rows, err := d.pool.Query(ctx, `SELECT d.id, d.run_id, d.user_id, d.parent_id, d.path, d.kind, d.title,
		d.description, d.content, d.tags, d.iteration, d.created_at, d.updated_at,
		ts_headline('english', d.content, query, 'StartSel=[, StopSel=], MaxWords=12, MinWords=4, FragmentDelimiter=…')
		FROM documents d, plainto_tsquery('english', `+q+`) query
		WHERE d.search @@ query AND `+where+` ORDER BY ts_rank(d.search, query) DESC, d.id LIMIT `+a.add(limit), a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spec.SearchHit
	for rows.Next() {
		var h spec.SearchHit
		doc, err := scanDocument(rows, &h.Snippet)
		if err != nil {
			return nil, err
		}
		h.Document = doc
		out = append(out, h)
	}
	return out, rows.Err()
}
