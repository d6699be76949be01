-- Homework's own tables. River owns its river_* tables (rivermigrate).
-- Times are integer milliseconds since the Unix epoch (UTC).

CREATE TABLE users (
	id            INTEGER PRIMARY KEY,
	email         TEXT NOT NULL UNIQUE COLLATE NOCASE,
	password_hash TEXT NOT NULL,
	is_admin      INTEGER NOT NULL DEFAULT 0,
	created_at    INTEGER NOT NULL
);

CREATE TABLE sessions (
	token_hash TEXT PRIMARY KEY,
	user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	csrf_token TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE INDEX sessions_user ON sessions(user_id);
CREATE INDEX sessions_expires ON sessions(expires_at);

CREATE TABLE api_tokens (
	id           INTEGER PRIMARY KEY,
	user_id      INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	name         TEXT NOT NULL DEFAULT '',
	token_hash   TEXT NOT NULL UNIQUE,
	created_at   INTEGER NOT NULL,
	last_used_at INTEGER,
	revoked_at   INTEGER
);
CREATE INDEX api_tokens_user ON api_tokens(user_id);

CREATE TABLE runs (
	id               TEXT PRIMARY KEY,
	user_id          INTEGER NOT NULL REFERENCES users(id),
	parent_run_id    TEXT REFERENCES runs(id),
	objective        TEXT NOT NULL,
	mode             TEXT NOT NULL,
	executor         TEXT NOT NULL,
	config           TEXT NOT NULL,
	status           TEXT NOT NULL,
	iteration        INTEGER NOT NULL DEFAULT 0,
	attempt          INTEGER NOT NULL DEFAULT 0,
	stop_reason      TEXT,
	waiting          TEXT,
	metrics          TEXT NOT NULL DEFAULT '{}',
	report           TEXT,
	workspace_doc_id TEXT,
	lease_owner      TEXT,
	lease_until      INTEGER,
	running_since    INTEGER,
	created_at       INTEGER NOT NULL,
	started_at       INTEGER,
	updated_at       INTEGER NOT NULL,
	completed_at     INTEGER
);
CREATE INDEX runs_user_created ON runs(user_id, created_at DESC, id DESC);
CREATE INDEX runs_user_status ON runs(user_id, status);
CREATE INDEX runs_status_created ON runs(status, created_at, id);
CREATE INDEX runs_parent ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE iterations (
	run_id            TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	iteration         INTEGER NOT NULL,
	attempt           INTEGER NOT NULL DEFAULT 1,
	status            TEXT NOT NULL,
	started_at        INTEGER NOT NULL,
	ended_at          INTEGER,
	summary           TEXT NOT NULL DEFAULT '',
	gate              TEXT,
	checks            TEXT,
	fingerprint       TEXT NOT NULL DEFAULT '',
	error             TEXT NOT NULL DEFAULT '',
	error_fingerprint TEXT NOT NULL DEFAULT '',
	metrics           TEXT NOT NULL DEFAULT '{}',
	artifacts         TEXT NOT NULL DEFAULT '{}',
	PRIMARY KEY (run_id, iteration)
);

-- A rowid table: id is the global order of the per-user feed, (run_id, seq)
-- the gap-free per-run order. About 3x the group-commit throughput of a
-- WITHOUT ROWID table clustered on (run_id, seq).
CREATE TABLE events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	run_id     TEXT NOT NULL,
	user_id    INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	type       TEXT NOT NULL,
	data       TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX events_run_seq ON events(run_id, seq);
CREATE INDEX events_user_id ON events(user_id, id);

CREATE TABLE documents (
	id          TEXT PRIMARY KEY,
	run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	user_id     INTEGER NOT NULL REFERENCES users(id),
	parent_id   TEXT REFERENCES documents(id),
	path        TEXT NOT NULL,
	kind        TEXT NOT NULL,
	title       TEXT NOT NULL DEFAULT '',
	description TEXT NOT NULL DEFAULT '',
	content     TEXT NOT NULL DEFAULT '',
	tags        TEXT NOT NULL DEFAULT '[]',
	iteration   INTEGER NOT NULL DEFAULT 0,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX documents_run_path ON documents(run_id, path);
CREATE INDEX documents_user ON documents(user_id, updated_at);
CREATE INDEX documents_parent ON documents(parent_id);

CREATE VIRTUAL TABLE documents_fts USING fts5(
	title, description, content,
	content='documents', content_rowid='rowid', tokenize='porter unicode61'
);
CREATE TRIGGER documents_ai AFTER INSERT ON documents BEGIN
	INSERT INTO documents_fts(rowid, title, description, content)
	VALUES (new.rowid, new.title, new.description, new.content);
END;
CREATE TRIGGER documents_ad AFTER DELETE ON documents BEGIN
	INSERT INTO documents_fts(documents_fts, rowid, title, description, content)
	VALUES ('delete', old.rowid, old.title, old.description, old.content);
END;
CREATE TRIGGER documents_au AFTER UPDATE ON documents BEGIN
	INSERT INTO documents_fts(documents_fts, rowid, title, description, content)
	VALUES ('delete', old.rowid, old.title, old.description, old.content);
	INSERT INTO documents_fts(rowid, title, description, content)
	VALUES (new.rowid, new.title, new.description, new.content);
END;

CREATE TABLE tasks (
	id         TEXT PRIMARY KEY,
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	title      TEXT NOT NULL,
	detail     TEXT NOT NULL DEFAULT '',
	status     TEXT NOT NULL DEFAULT 'todo' CHECK (status IN ('todo','doing','done','blocked')),
	passes     INTEGER NOT NULL DEFAULT 0,
	position   INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE INDEX tasks_run ON tasks(run_id, position);

CREATE TABLE inbox (
	id                 INTEGER PRIMARY KEY,
	run_id             TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	kind               TEXT NOT NULL CHECK (kind IN ('answer','message')),
	body               TEXT NOT NULL,
	created_at         INTEGER NOT NULL,
	consumed_at        INTEGER,
	consumed_iteration INTEGER
);
CREATE INDEX inbox_run_pending ON inbox(run_id, id) WHERE consumed_at IS NULL;

CREATE TABLE llm_calls (
	id                INTEGER PRIMARY KEY,
	run_id            TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	iteration         INTEGER NOT NULL,
	role              TEXT NOT NULL,
	model             TEXT NOT NULL,
	prompt_tokens     INTEGER NOT NULL DEFAULT 0,
	completion_tokens INTEGER NOT NULL DEFAULT 0,
	cost_usd          REAL NOT NULL DEFAULT 0,
	priced            INTEGER NOT NULL DEFAULT 1,
	latency_ms        INTEGER NOT NULL DEFAULT 0,
	error             TEXT NOT NULL DEFAULT '',
	created_at        INTEGER NOT NULL
);
CREATE INDEX llm_calls_run ON llm_calls(run_id, iteration);

CREATE TABLE notifications (
	id         INTEGER PRIMARY KEY,
	user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	run_id     TEXT REFERENCES runs(id) ON DELETE CASCADE,
	kind       TEXT NOT NULL,
	title      TEXT NOT NULL,
	message    TEXT NOT NULL DEFAULT '',
	action_url TEXT NOT NULL DEFAULT '',
	data       TEXT NOT NULL DEFAULT '{}',
	read_at    INTEGER,
	created_at INTEGER NOT NULL
);
CREATE INDEX notifications_user ON notifications(user_id, id DESC);
CREATE INDEX notifications_unread ON notifications(user_id) WHERE read_at IS NULL;
