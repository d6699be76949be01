package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"homework/engine/spec"
	"strings"
	"time"

	"github.com/google/uuid"
)

const docCols = `id, run_id, user_id, parent_id, path, kind, title, description, content, tags, iteration, created_at, updated_at`

func scanDocument(s rowScanner) (*spec.Document, error) {
	var d spec.Document
	var parent sql.NullString
	var tags string
	var created, updated int64
	if err := s.Scan(&d.ID, &d.RunID, &d.UserID, &parent, &d.Path, &d.Kind, &d.Title, &d.Description, &d.Content,
		&tags, &d.Iteration, &created, &updated); err != nil {
		return nil, err
	}
	d.ParentID = parent.String
	json.Unmarshal([]byte(tags), &d.Tags)
	d.CreatedAt, d.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &d, nil
}

func scanDocuments(rows *sql.Rows) ([]*spec.Document, error) {
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
// The document's ID, UserID, CreatedAt and UpdatedAt are filled in.
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
		_, err := tx.ExecContext(ctx, `UPDATE documents SET parent_id=?, kind=?, title=?, description=?, content=?, tags=?,
			iteration=?, updated_at=? WHERE id=?`, nullString(doc.ParentID), doc.Kind, doc.Title, doc.Description,
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
	err = tx.QueryRowContext(ctx, `INSERT INTO documents (`+docCols+`)
		SELECT ?, r.id, r.user_id, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM runs r WHERE r.id = ? RETURNING user_id`,
		doc.ID, nullString(doc.ParentID), doc.Path, doc.Kind, doc.Title, doc.Description, doc.Content, string(tags),
		doc.Iteration, tx.now.UnixMilli(), tx.now.UnixMilli(), doc.RunID).Scan(&doc.UserID)
	if err != nil {
		return false, notFound(err, "Run")
	}
	return true, nil
}

// FindDocumentByPath returns the run's document at path inside tx.
func (tx *Tx) FindDocumentByPath(ctx context.Context, runID, path string) (*spec.Document, error) {
	d, err := scanDocument(tx.QueryRowContext(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = ? AND path = ?`, runID, path))
	return d, notFound(err, "Document")
}

// ListRunDocumentsTx returns the run's documents inside tx, by path.
func (tx *Tx) ListRunDocuments(ctx context.Context, runID string) ([]*spec.Document, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = ? ORDER BY path`, runID)
	if err != nil {
		return nil, err
	}
	return scanDocuments(rows)
}

// FindDocument returns the user's document. Another user's is ENOTFOUND.
func (d reads) FindDocument(ctx context.Context, userID int64, id string) (*spec.Document, error) {
	doc, err := scanDocument(d.q.QueryRowContext(ctx, `SELECT `+docCols+` FROM documents WHERE id = ? AND user_id = ?`, id, userID))
	return doc, notFound(err, "Document")
}

// FindRunDocumentByPath returns the document at path in the user's run.
func (d *DB) FindRunDocumentByPath(ctx context.Context, userID int64, runID, path string) (*spec.Document, error) {
	doc, err := scanDocument(d.reader.QueryRowContext(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = ? AND path = ? AND user_id = ?`,
		runID, path, userID))
	return doc, notFound(err, "Document")
}

// ListRunDocuments returns the documents of the user's run, ordered by path.
func (d reads) ListRunDocuments(ctx context.Context, userID int64, runID string) ([]*spec.Document, error) {
	if err := d.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	rows, err := d.q.QueryContext(ctx, `SELECT `+docCols+` FROM documents WHERE run_id = ? ORDER BY path`, runID)
	if err != nil {
		return nil, err
	}
	return scanDocuments(rows)
}

// SearchDocuments runs a full-text query over the user's documents (all runs,
// or one run when runID is set), best matches first.
func (d *DB) SearchDocuments(ctx context.Context, userID int64, runID, query string, limit int) ([]spec.SearchHit, error) {
	q := ftsQuery(query)
	if q == "" {
		return nil, spec.FieldError("q", "Search query is empty.")
	}
	if limit <= 0 || limit > 100 {
		limit = 20
	}
	args := []any{q, userID}
	where := ""
	if runID != "" {
		where = " AND d.run_id = ?"
		args = append(args, runID)
	}
	args = append(args, limit)
	rows, err := d.reader.QueryContext(ctx, `SELECT d.id, d.run_id, d.user_id, d.parent_id, d.path, d.kind, d.title,
		d.description, d.content, d.tags, d.iteration, d.created_at, d.updated_at,
		snippet(documents_fts, 2, '[', ']', '…', 12)
		FROM documents_fts JOIN documents d ON d.rowid = documents_fts.rowid
		WHERE documents_fts MATCH ? AND d.user_id = ?`+where+` ORDER BY bm25(documents_fts) LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []spec.SearchHit
	for rows.Next() {
		var h spec.SearchHit
		var doc spec.Document
		var parent sql.NullString
		var tags string
		var created, updated int64
		if err := rows.Scan(&doc.ID, &doc.RunID, &doc.UserID, &parent, &doc.Path, &doc.Kind, &doc.Title, &doc.Description,
			&doc.Content, &tags, &doc.Iteration, &created, &updated, &h.Snippet); err != nil {
			return nil, err
		}
		doc.ParentID = parent.String
		json.Unmarshal([]byte(tags), &doc.Tags)
		doc.CreatedAt, doc.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
		h.Document = &doc
		out = append(out, h)
	}
	return out, rows.Err()
}

// ftsQuery turns free text into a safe FTS5 query: each word quoted, all
// required, so user input can never be FTS5 syntax.
func ftsQuery(s string) string {
	var terms []string
	for _, w := range strings.Fields(s) {
		w = strings.ReplaceAll(w, `"`, `""`)
		terms = append(terms, `"`+w+`"`)
		if len(terms) == 16 {
			break
		}
	}
	return strings.Join(terms, " ")
}
