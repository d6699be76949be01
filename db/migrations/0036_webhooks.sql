-- Webhook endpoints (a user's receivers of run events, Standard Webhooks or
-- Slack) and their deliveries, each worked by a River job of kind webhook.
-- The secret signs deliveries, so it is stored as is (it is shown to the
-- user once, at creation).
CREATE TABLE webhook_endpoints (
	id          INTEGER PRIMARY KEY,
	user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	url         TEXT NOT NULL,
	events      TEXT NOT NULL,
	format      TEXT NOT NULL,
	secret      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	disabled_at INTEGER
);
CREATE INDEX webhook_endpoints_user ON webhook_endpoints(user_id);

CREATE TABLE webhook_deliveries (
	id              INTEGER PRIMARY KEY,
	endpoint_id     INTEGER NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
	user_id         INTEGER NOT NULL,
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
	next_attempt_at INTEGER,
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries(endpoint_id, id DESC);
