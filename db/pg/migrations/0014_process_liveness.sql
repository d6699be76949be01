-- Each serving process holds a session-level advisory lock for as long as it
-- lives (key: livenessClass << 32 | liveness_key). The database releases it
-- the moment the process's session ends, however the process ends, so the
-- others recover a dead process's runs at once instead of after its leases.
CREATE SEQUENCE process_liveness;
ALTER TABLE processes ADD COLUMN liveness_key BIGINT;
