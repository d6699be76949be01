-- A run's documents outside some folders (an LLM iteration's workspace,
-- without its iteration summaries) are read as ranges of path in byte
-- order (ListRunDocumentsOutside). The database's collation may order text
-- by language, so documents_run_path cannot serve those ranges: this index
-- does.
CREATE INDEX documents_run_path_bytes ON documents (run_id, path COLLATE "C");
