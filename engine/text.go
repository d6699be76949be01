package engine

import "homework/internal/text"

// The engine's names for the shared text helpers.
var (
	truncate       = text.Truncate
	normalizeError = text.NormalizeError
)
