-- A model call's tokens split as providers bill them, and where its cost
-- came from (see the SQLite migration of the same number).
ALTER TABLE llm_calls ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN reasoning_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN cost_source TEXT NOT NULL DEFAULT '';
ALTER TABLE llm_calls ADD COLUMN table_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0;
