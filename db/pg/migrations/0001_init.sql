-- Homework's own tables on PostgreSQL. River owns its river_* tables
-- (rivermigrate with riverpgxv5). Times are integer milliseconds since the
-- Unix epoch (UTC), as in the SQLite schema, so both stores read alike.

CREATE TABLE users (
	id            BIGSERIAL PRIMARY KEY,
	email         TEXT NOT NULL,
	password_hash TEXT NOT NULL,
	is_admin      BOOLEAN NOT NULL DEFAULT false,
	created_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX users_email ON users (lower(email));

CREATE TABLE sessions (
	token_hash TEXT PRIMARY KEY,
	user_id    BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	csrf_token TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions(user_id);
CREATE INDEX sessions_expires ON sessions(expires_at);

CREATE TABLE api_tokens (
	id           BIGSERIAL PRIMARY KEY,
	user_id      BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	name         TEXT NOT NULL DEFAULT '',
	token_hash   TEXT NOT NULL UNIQUE,
	created_at   BIGINT NOT NULL,
	last_used_at BIGINT,
	revoked_at   BIGINT
);
CREATE INDEX api_tokens_user ON api_tokens(user_id);

-- last_seq is the run's event counter: an append increments it in its own
-- transaction, which row-locks the run until commit, so seqs are gap-free
-- and ordered across every process writing the database.
CREATE TABLE runs (
	id               TEXT PRIMARY KEY,
	user_id          BIGINT NOT NULL REFERENCES users(id),
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
	lease_until      BIGINT,
	running_since    BIGINT,
	created_at       BIGINT NOT NULL,
	started_at       BIGINT,
	updated_at       BIGINT NOT NULL,
	completed_at     BIGINT,
	last_seq         BIGINT NOT NULL DEFAULT 0
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
	started_at        BIGINT NOT NULL,
	ended_at          BIGINT,
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

-- id is the global order of the per-user feed, (run_id, seq) the gap-free
-- per-run order.
CREATE TABLE events (
	id         BIGSERIAL PRIMARY KEY,
	run_id     TEXT NOT NULL,
	user_id    BIGINT NOT NULL,
	seq        BIGINT NOT NULL,
	type       TEXT NOT NULL,
	data       TEXT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX events_run_seq ON events(run_id, seq);
CREATE INDEX events_user_id ON events(user_id, id);

CREATE TABLE documents (
	id          TEXT PRIMARY KEY,
	run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	user_id     BIGINT NOT NULL REFERENCES users(id),
	parent_id   TEXT REFERENCES documents(id),
	path        TEXT NOT NULL,
	kind        TEXT NOT NULL,
	title       TEXT NOT NULL DEFAULT '',
	description TEXT NOT NULL DEFAULT '',
	content     TEXT NOT NULL DEFAULT '',
	tags        TEXT NOT NULL DEFAULT '[]',
	iteration   INTEGER NOT NULL DEFAULT 0,
	created_at  BIGINT NOT NULL,
	updated_at  BIGINT NOT NULL,
	search      tsvector GENERATED ALWAYS AS (
		setweight(to_tsvector('english', title), 'A') ||
		setweight(to_tsvector('english', description), 'B') ||
		setweight(to_tsvector('english', content), 'C')) STORED
);
CREATE UNIQUE INDEX documents_run_path ON documents(run_id, path);
CREATE INDEX documents_user ON documents(user_id, updated_at);
CREATE INDEX documents_parent ON documents(parent_id);
CREATE INDEX documents_search ON documents USING GIN (search);

CREATE TABLE tasks (
	id         TEXT PRIMARY KEY,
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	title      TEXT NOT NULL,
	detail     TEXT NOT NULL DEFAULT '',
	status     TEXT NOT NULL DEFAULT 'todo' CHECK (status IN ('todo','doing','done','blocked')),
	passes     BOOLEAN NOT NULL DEFAULT false,
	position   INTEGER NOT NULL DEFAULT 0,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL
);
CREATE INDEX tasks_run ON tasks(run_id, position);

CREATE TABLE inbox (
	id                 BIGSERIAL PRIMARY KEY,
	run_id             TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	kind               TEXT NOT NULL CHECK (kind IN ('answer','message')),
	body               TEXT NOT NULL,
	created_at         BIGINT NOT NULL,
	consumed_at        BIGINT,
	consumed_iteration INTEGER
);
CREATE INDEX inbox_run_pending ON inbox(run_id, id) WHERE consumed_at IS NULL;

CREATE TABLE llm_calls (
	id                BIGSERIAL PRIMARY KEY,
	run_id            TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	iteration         INTEGER NOT NULL,
	role              TEXT NOT NULL,
	model             TEXT NOT NULL,
	prompt_tokens     BIGINT NOT NULL DEFAULT 0,
	completion_tokens BIGINT NOT NULL DEFAULT 0,
	cost_usd          DOUBLE PRECISION NOT NULL DEFAULT 0,
	priced            BOOLEAN NOT NULL DEFAULT true,
	latency_ms        BIGINT NOT NULL DEFAULT 0,
	error             TEXT NOT NULL DEFAULT '',
	created_at        BIGINT NOT NULL
);
CREATE INDEX llm_calls_run ON llm_calls(run_id, iteration);

CREATE TABLE notifications (
	id         BIGSERIAL PRIMARY KEY,
	user_id    BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	run_id     TEXT REFERENCES runs(id) ON DELETE CASCADE,
	kind       TEXT NOT NULL,
	title      TEXT NOT NULL,
	message    TEXT NOT NULL DEFAULT '',
	action_url TEXT NOT NULL DEFAULT '',
	data       TEXT NOT NULL DEFAULT '{}',
	read_at    BIGINT,
	created_at BIGINT NOT NULL
);
CREATE INDEX notifications_user ON notifications(user_id, id DESC);
CREATE INDEX notifications_unread ON notifications(user_id) WHERE read_at IS NULL;
