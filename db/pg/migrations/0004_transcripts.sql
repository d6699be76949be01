-- Iteration transcripts: what the agent actually did, line by line.
CREATE TABLE transcript_lines (
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	iteration  INTEGER NOT NULL,
	seq        BIGINT NOT NULL,
	attempt    INTEGER NOT NULL DEFAULT 1,
	kind       TEXT NOT NULL,
	name       TEXT NOT NULL DEFAULT '',
	role       TEXT NOT NULL DEFAULT '',
	text       TEXT NOT NULL DEFAULT '',
	data       TEXT,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (run_id, iteration, seq)
);

-- One row per iteration with a transcript: its size and what the cap dropped.
CREATE TABLE transcripts (
	run_id        TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	iteration     INTEGER NOT NULL,
	lines         BIGINT NOT NULL DEFAULT 0,
	bytes         BIGINT NOT NULL DEFAULT 0,
	dropped_bytes BIGINT NOT NULL DEFAULT 0,
	dropped_lines BIGINT NOT NULL DEFAULT 0,
	cap_bytes     BIGINT NOT NULL DEFAULT 0,
	updated_at    BIGINT NOT NULL,
	PRIMARY KEY (run_id, iteration)
);

-- The run page's timeline of actions.
CREATE INDEX events_run_actions ON events(run_id, seq) WHERE type IN ('iteration_started', 'run_waiting_on_user',
	'user_response', 'message_queued', 'run_stopped', 'run_stalled', 'run_continued', 'run_canceled', 'run_recovered',
	'run_completed', 'run_failed');
