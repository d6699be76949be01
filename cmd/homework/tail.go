package main

import (
	"context"
	"io"
)

// tail follows a run's events; see tail in the API issue.
func tail(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	return usagef("tail: not built yet")
}
