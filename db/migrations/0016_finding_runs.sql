-- Finding runs: full-text search over objectives (documents have their own
-- index), and the run list's filter and sort keys as generated columns so
-- that cost can be indexed for keyset paging.
CREATE VIRTUAL TABLE runs_fts USING fts5(
	objective,
	content='runs', content_rowid='rowid', tokenize='porter unicode61'
);
INSERT INTO runs_fts(runs_fts) VALUES ('rebuild');
CREATE TRIGGER runs_fts_ai AFTER INSERT ON runs BEGIN
	INSERT INTO runs_fts(rowid, objective) VALUES (new.rowid, new.objective);
END;
CREATE TRIGGER runs_fts_ad AFTER DELETE ON runs BEGIN
	INSERT INTO runs_fts(runs_fts, rowid, objective) VALUES ('delete', old.rowid, old.objective);
END;
-- UpdateRun writes every column; only a changed objective touches the index.
CREATE TRIGGER runs_fts_au AFTER UPDATE OF objective ON runs WHEN old.objective IS NOT new.objective BEGIN
	INSERT INTO runs_fts(runs_fts, rowid, objective) VALUES ('delete', old.rowid, old.objective);
	INSERT INTO runs_fts(rowid, objective) VALUES (new.rowid, new.objective);
END;

ALTER TABLE runs ADD COLUMN cost_usd REAL GENERATED ALWAYS AS (COALESCE(json_extract(metrics, '$.cost_total_usd'), 0)) VIRTUAL;
ALTER TABLE runs ADD COLUMN stop_type TEXT GENERATED ALWAYS AS (json_extract(stop_reason, '$.type')) VIRTUAL;
CREATE INDEX runs_user_cost ON runs(user_id, cost_usd, id);

-- Notifications resolve themselves: a "waiting for you" or "stopped"
-- notification is resolved (and so read) once the run moves on.
ALTER TABLE notifications ADD COLUMN resolved_at INTEGER;
CREATE INDEX notifications_run_unread ON notifications(run_id) WHERE read_at IS NULL;
