-- Command runs are bound to the host (and command-run root) holding their
-- work directory. A process that may run them records its host, root and
-- the job queue it works for them with its heartbeat; a command run records
-- the host it was created for, and its iterate jobs go to that queue only.
ALTER TABLE processes ADD COLUMN command_host TEXT;
ALTER TABLE processes ADD COLUMN command_root TEXT;
ALTER TABLE processes ADD COLUMN command_queue TEXT;

CREATE TABLE run_hosts (
	run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	host   TEXT NOT NULL,
	root   TEXT NOT NULL,
	queue  TEXT NOT NULL
);
CREATE INDEX run_hosts_queue ON run_hosts(queue);
