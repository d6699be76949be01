-- A model call's tokens split as providers bill them, and where its cost
-- came from: cached_tokens and cache_write_tokens are parts of
-- prompt_tokens, reasoning_tokens of completion_tokens; cost_source is
-- 'cli' (the agent CLI's own figure), 'table' (the price table) or '' (no
-- price); table_cost_usd keeps the table's figure when a CLI-reported cost
-- differs from it by more than 5%.
ALTER TABLE llm_calls ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN cost_source TEXT NOT NULL DEFAULT '';
ALTER TABLE llm_calls ADD COLUMN table_cost_usd REAL NOT NULL DEFAULT 0;
