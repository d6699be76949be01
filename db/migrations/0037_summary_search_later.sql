-- Iteration summaries are indexed for full-text search in batches, not in
-- the transaction that writes them. Every LLM iteration writes one summary
-- in the transaction that finishes it, and FTS5 writes a new index segment
-- (and merges older ones) in every transaction that indexes anything: about
-- as many pages again as the summary's own row and indexes, on the one
-- writer, every iteration. A new summary's rowid waits in
-- documents_fts_pending instead; the 32nd pending one indexes them all in
-- one segment, and the store indexes what waits before a search and shortly
-- after the write (db/ftslater.go).
--
-- documents_fts_docsize (FTS5's own table: one row per indexed document) is
-- what says whether a document is indexed, so a document is never removed
-- from the index unless it is in it, nor added twice.
CREATE TABLE documents_fts_pending (rowid INTEGER PRIMARY KEY);

DROP TRIGGER documents_ai;
CREATE TRIGGER documents_ai AFTER INSERT ON documents BEGIN
	INSERT INTO documents_fts(rowid, title, description, content)
	SELECT new.rowid, new.title, new.description, new.content WHERE new.kind <> 'summary';
	INSERT INTO documents_fts_pending(rowid) SELECT new.rowid WHERE new.kind = 'summary';
END;

DROP TRIGGER documents_ad;
CREATE TRIGGER documents_ad AFTER DELETE ON documents BEGIN
	INSERT INTO documents_fts(documents_fts, rowid, title, description, content)
	SELECT 'delete', old.rowid, old.title, old.description, old.content
	WHERE EXISTS (SELECT 1 FROM documents_fts_docsize WHERE id = old.rowid);
	DELETE FROM documents_fts_pending WHERE rowid = old.rowid;
END;

-- A pending document is indexed with the content it has when its batch is.
DROP TRIGGER documents_au;
CREATE TRIGGER documents_au AFTER UPDATE ON documents BEGIN
	INSERT INTO documents_fts(documents_fts, rowid, title, description, content)
	SELECT 'delete', old.rowid, old.title, old.description, old.content
	WHERE EXISTS (SELECT 1 FROM documents_fts_docsize WHERE id = old.rowid);
	INSERT INTO documents_fts(rowid, title, description, content)
	SELECT new.rowid, new.title, new.description, new.content
	WHERE NOT EXISTS (SELECT 1 FROM documents_fts_pending WHERE rowid = new.rowid);
END;

CREATE TRIGGER documents_fts_pending_batch AFTER INSERT ON documents_fts_pending
WHEN (SELECT COUNT(*) FROM documents_fts_pending) >= 32 BEGIN
	INSERT INTO documents_fts(rowid, title, description, content)
	SELECT d.rowid, d.title, d.description, d.content
	FROM documents_fts_pending p JOIN documents d ON d.rowid = p.rowid
	WHERE NOT EXISTS (SELECT 1 FROM documents_fts_docsize s WHERE s.id = p.rowid);
	DELETE FROM documents_fts_pending;
END;
