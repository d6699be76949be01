package agentcmd

import "homework/internal/text"

// The package's names for the shared text helpers.
var (
	truncate = text.Truncate
	oneLine  = text.OneLine
)
