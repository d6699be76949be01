package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strings"

	"github.com/google/uuid"

	"homework/engine/spec"
)

// DocumentColumns are a document row's columns, in scanDocument's order.
const DocumentColumns = `id, run_id, user_id, parent_id, path, kind, title, description, content, tags, iteration, created_at, updated_at`

func scanDocument(s Row, extra ...any) (*spec.Document, error) {
	var d spec.Document
	var parent sql.NullString
	var tags string
	var created, updated int64
	dest := append([]any{&d.ID, &d.RunID, &d.UserID, &parent, &d.Path, &d.Kind, &d.Title, &d.Description, &d.Content,
		&tags, &d.Iteration, &created, &updated}, extra...)
	if err := s.Scan(dest...); err != nil {
		return nil, err
	}
	d.ParentID = parent.String
	json.Unmarshal([]byte(tags), &d.Tags)
	d.CreatedAt, d.UpdatedAt = msTime(created), msTime(updated)
	return &d, nil
}

func scanDocuments(rows Rows, err error) ([]*spec.Document, error) {
	if err != nil {
		return nil, err
	}
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
		_, err := tx.c.Exec(ctx, `UPDATE documents SET parent_id=?, kind=?, title=?, description=?, content=?, tags=?,
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
	err = tx.c.QueryRow(ctx, `INSERT INTO documents (`+DocumentColumns+`)
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
	d, err := scanDocument(tx.c.QueryRow(ctx, `SELECT `+DocumentColumns+` FROM documents WHERE run_id = ? AND path = ?`, runID, path))
	return d, notFound(err, "Document")
}

// ListRunDocuments returns the run's documents inside tx, by path.
func (tx *Tx) ListRunDocuments(ctx context.Context, runID string) ([]*spec.Document, error) {
	return scanDocuments(tx.c.Query(ctx, `SELECT `+DocumentColumns+` FROM documents WHERE run_id = ? ORDER BY path`, runID))
}

// FindDocument returns the user's document. Another user's is ENOTFOUND.
func (r Reads) FindDocument(ctx context.Context, userID int64, id string) (*spec.Document, error) {
	doc, err := scanDocument(r.c.QueryRow(ctx, `SELECT `+DocumentColumns+` FROM documents WHERE id = ? AND user_id = ?`, id, userID))
	return doc, notFound(err, "Document")
}

// FindRunDocumentByPath returns the document at path in the user's run.
func (r Reads) FindRunDocumentByPath(ctx context.Context, userID int64, runID, path string) (*spec.Document, error) {
	doc, err := scanDocument(r.c.QueryRow(ctx, `SELECT `+DocumentColumns+` FROM documents WHERE run_id = ? AND path = ? AND user_id = ?`,
		runID, path, userID))
	return doc, notFound(err, "Document")
}

// ListRunDocuments returns the documents of the user's run, ordered by path.
func (r Reads) ListRunDocuments(ctx context.Context, userID int64, runID string) ([]*spec.Document, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	return scanDocuments(r.c.Query(ctx, `SELECT `+DocumentColumns+` FROM documents WHERE run_id = ? ORDER BY path`, runID))
}

// ListRunDocumentsOutside returns the documents of the user's run, ordered
// by path, but those inside folders (their folder documents are listed).
// The rows left out are not read: an executor reading its workspace every
// iteration skips what grows with the run (iteration summaries, archives).
// In byte order the paths inside a folder f are the range ["f/", "f0")
// ('0' follows '/'), so the rows outside are read as the ranges of the
// (run_id, path) index between those, each a search of its own.
func (r Reads) ListRunDocumentsOutside(ctx context.Context, userID int64, runID string, folders ...string) ([]*spec.Document, error) {
	if err := r.checkRunOwner(ctx, userID, runID); err != nil {
		return nil, err
	}
	path := "path" + r.d.ByteOrder
	var where []string
	var args []any
	// rng reads the run's paths from lo up to hi ("": no bound).
	rng := func(lo, hi string) {
		w := `run_id = ?`
		args = append(args, runID)
		if lo != "" {
			w += ` AND ` + path + ` >= ?`
			args = append(args, lo)
		}
		if hi != "" {
			w += ` AND ` + path + ` < ?`
			args = append(args, hi)
		}
		where = append(where, w)
	}
	from := ""
	for _, out := range prefixRanges(folders) {
		if out[0] > from {
			rng(from, out[0])
		}
		from = max(from, out[1])
	}
	rng(from, "")
	q := `SELECT ` + DocumentColumns + ` FROM documents WHERE ` +
		strings.Join(where, ` UNION ALL SELECT `+DocumentColumns+` FROM documents WHERE `)
	return scanDocuments(r.c.Query(ctx, q+` ORDER BY path`, args...))
}

// prefixRanges returns, in byte order, the ranges [f+"/", f+"0") of the
// paths inside each folder f.
func prefixRanges(folders []string) [][2]string {
	out := make([][2]string, 0, len(folders))
	for _, f := range folders {
		out = append(out, [2]string{f + "/", f + "0"})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// SearchDocuments runs a full-text query over the user's documents (all runs,
// or one run when runID is set), best matches first.
func (r Reads) SearchDocuments(ctx context.Context, userID int64, runID, query string, limit int) ([]spec.SearchHit, error) {
	if limit <= 0 || limit > 100 {
		limit = 20
	}
	from, match, snippet, order, args := r.d.Search.DocumentMatch(query)
	if from == "" {
		return nil, spec.FieldError("q", "Search query is empty.")
	}
	where := match + " AND d.user_id = ?"
	args = append(args, userID)
	if runID != "" {
		where += " AND d.run_id = ?"
		args = append(args, runID)
	}
	rows, err := r.c.Query(ctx, `SELECT d.`+strings.ReplaceAll(DocumentColumns, ", ", ", d.")+`, `+snippet+
		` FROM `+from+` WHERE `+where+` ORDER BY `+order+` LIMIT ?`, append(args, limit)...)
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
