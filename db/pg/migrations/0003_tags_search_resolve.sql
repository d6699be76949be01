-- Run tags (the effectiveness report groups and filters by them; the run
-- list filters by them). The tags are also kept in the run's config JSON.
CREATE TABLE run_tags (
	run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	user_id BIGINT NOT NULL,
	tag     TEXT NOT NULL,
	PRIMARY KEY (run_id, tag)
);
CREATE INDEX run_tags_user_tag ON run_tags(user_id, tag, run_id);

-- The report's escalation rate asks, per run, whether it ever waited on
-- the person: one index seek per run.
CREATE INDEX events_run_waiting ON events(run_id) WHERE type = 'run_waiting_on_user';

-- Finding runs: full-text search over objectives, and the run list's
-- filter and sort keys as stored generated columns so that cost can be
-- indexed for keyset paging.
ALTER TABLE runs ADD COLUMN objective_tsv tsvector
	GENERATED ALWAYS AS (to_tsvector('english', objective)) STORED;
CREATE INDEX runs_objective_tsv ON runs USING GIN (objective_tsv);
ALTER TABLE runs ADD COLUMN cost_usd DOUBLE PRECISION
	GENERATED ALWAYS AS (CASE WHEN metrics IS NULL OR metrics = '' THEN 0
		ELSE COALESCE((metrics::jsonb ->> 'cost_total_usd')::double precision, 0) END) STORED;
ALTER TABLE runs ADD COLUMN stop_type TEXT
	GENERATED ALWAYS AS (CASE WHEN stop_reason IS NULL OR stop_reason = '' OR stop_reason = 'null' THEN NULL
		ELSE stop_reason::jsonb ->> 'type' END) STORED;
CREATE INDEX runs_user_cost ON runs(user_id, cost_usd, id);

-- Notifications resolve themselves once the run moves on.
ALTER TABLE notifications ADD COLUMN resolved_at BIGINT;
CREATE INDEX notifications_run_unread ON notifications(run_id) WHERE read_at IS NULL;
