// Package static embeds the server's CSS, scripts and vendored libraries.
package static

import "embed"

// FS holds every asset under static/, served at /static/.
//
//go:embed css vendor js
var FS embed.FS
