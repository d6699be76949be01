// Package static embeds the server's CSS, scripts and vendored libraries.
package static

import "embed"

//go:generate go run ./termcss

// FS holds every asset under static/, served at /static/ (and the icon at
// /favicon.ico, where browsers ask for it).
//
//go:embed css vendor js favicon.ico
var FS embed.FS
