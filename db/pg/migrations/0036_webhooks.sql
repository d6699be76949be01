-- Webhook endpoints and their deliveries (see the SQLite migration of the
-- same number).
CREATE TABLE webhook_endpoints (
	id          BIGSERIAL PRIMARY KEY,
	user_id     BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	url         TEXT NOT NULL,
	events      TEXT NOT NULL,
	format      TEXT NOT NULL,
	secret      TEXT NOT NULL,
	created_at  BIGINT NOT NULL,
	disabled_at BIGINT
);
CREATE INDEX webhook_endpoints_user ON webhook_endpoints(user_id);

CREATE TABLE webhook_deliveries (
	id              BIGSERIAL PRIMARY KEY,
	endpoint_id     BIGINT NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
	user_id         BIGINT NOT NULL,
	run_id          TEXT,
	event           TEXT NOT NULL,
	webhook_id      TEXT NOT NULL UNIQUE,
	body            TEXT NOT NULL,
	state           TEXT NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	generation      INTEGER NOT NULL DEFAULT 1,
	last_status     INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT NOT NULL DEFAULT '',
	last_response   TEXT NOT NULL DEFAULT '',
	next_attempt_at BIGINT,
	created_at      BIGINT NOT NULL,
	updated_at      BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries(endpoint_id, id DESC);
