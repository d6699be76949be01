package llm

import (
	"cmp"

	"homework/internal/text"
)

// The package's names for the shared text helpers.
var (
	truncate       = text.Truncate
	oneLine        = text.Collapse
	normalizeError = text.NormalizeError
	orDefault      = cmp.Or[string]
)
