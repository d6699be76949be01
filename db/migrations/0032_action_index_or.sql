-- The timeline's partial index on action events, with its predicate as a
-- chain of equalities instead of an IN list: SQLite evaluates a partial
-- index's predicate on every insert into events, and for an IN list of
-- constants it builds a temporary table of the eleven types per inserted
-- row, about 15% of an event append's CPU. ListRunActions repeats this
-- predicate verbatim so that it still uses the index.
DROP INDEX events_run_actions;
CREATE INDEX events_run_actions ON events(run_id, seq) WHERE type = 'iteration_started' OR type = 'run_waiting_on_user'
	OR type = 'user_response' OR type = 'message_queued' OR type = 'run_stopped' OR type = 'run_stalled'
	OR type = 'run_continued' OR type = 'run_canceled' OR type = 'run_recovered' OR type = 'run_completed' OR type = 'run_failed';
