-- Every serving process records a heartbeat; recovery leaves the runs of a
-- process whose heartbeat is fresh to that process.
CREATE TABLE processes (
	id           TEXT PRIMARY KEY,
	host         TEXT NOT NULL,
	pid          INTEGER NOT NULL,
	started_at   BIGINT NOT NULL,
	heartbeat_at BIGINT NOT NULL
);
CREATE INDEX processes_heartbeat ON processes(heartbeat_at);
