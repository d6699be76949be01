package llm

// The executor reads and writes through the store contract in
// engine/spec/store.go: spec.Store outside a transaction, spec.Tx inside
// one (its workspace documents and checklist tasks, the events that record
// them, the summarizer's model calls).
