-- Iteration transcripts: what the agent actually did, line by line (model
-- messages, tool calls with arguments and results, repairs, retries, a
-- command agent's prompt and output). Numbered 0011 after the issue that
-- added it, so that parallel migrations do not collide on a version.
CREATE TABLE transcript_lines (
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	iteration  INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	attempt    INTEGER NOT NULL DEFAULT 1,
	kind       TEXT NOT NULL,
	name       TEXT NOT NULL DEFAULT '',
	role       TEXT NOT NULL DEFAULT '',
	text       TEXT NOT NULL DEFAULT '',
	data       TEXT,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (run_id, iteration, seq)
) WITHOUT ROWID;

-- One row per iteration with a transcript: its size and what the cap dropped.
CREATE TABLE transcripts (
	run_id        TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	iteration     INTEGER NOT NULL,
	lines         INTEGER NOT NULL DEFAULT 0,
	bytes         INTEGER NOT NULL DEFAULT 0,
	dropped_bytes INTEGER NOT NULL DEFAULT 0,
	dropped_lines INTEGER NOT NULL DEFAULT 0,
	cap_bytes     INTEGER NOT NULL DEFAULT 0,
	updated_at    INTEGER NOT NULL,
	PRIMARY KEY (run_id, iteration)
);

-- The run page's timeline lists the person's and the platform's actions
-- (questions, answers, messages, stops, continues, cancels, recoveries)
-- beside the iterations; this index finds them without reading every event.
CREATE INDEX events_run_actions ON events(run_id, seq) WHERE type IN ('iteration_started', 'run_waiting_on_user',
	'user_response', 'message_queued', 'run_stopped', 'run_stalled', 'run_continued', 'run_canceled', 'run_recovered',
	'run_completed', 'run_failed');
