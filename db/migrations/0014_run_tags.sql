-- Run tags (issue 14): the tags given at creation, also kept in the run's
-- config JSON. This table is the index the run list filter and the
-- effectiveness report group and filter by.
CREATE TABLE run_tags (
	run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	user_id INTEGER NOT NULL,
	tag     TEXT NOT NULL,
	PRIMARY KEY (run_id, tag)
) WITHOUT ROWID;
CREATE INDEX run_tags_user_tag ON run_tags(user_id, tag, run_id);

-- The report's escalation rate asks, per run, whether it ever waited on the
-- person. This partial index answers that with one seek per run.
CREATE INDEX events_run_waiting ON events(run_id) WHERE type = 'run_waiting_on_user';
