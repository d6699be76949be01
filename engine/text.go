package engine

import "homework/engine/text"

// The engine's names for the shared text helpers.
var (
	truncate       = text.Truncate
	normalizeError = text.NormalizeError
)
