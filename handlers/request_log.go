package handlers

import (
	"log/slog"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
)

// requestLog logs one line per request: method, path, status, duration and
// the signed-in user's id. It never logs the query string, headers or
// cookies, where tokens and session secrets travel. Health checks and
// static files log at debug level, the rest at info (server errors at
// error level). An event stream's line is written when its handler hands
// the stream off, not when the stream ends.
func (s *Server) requestLog(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	if err != nil {
		// Let the error handler set the status now, so the line shows the
		// status the client gets.
		if herr := c.App().ErrorHandler(c, err); herr != nil {
			c.Status(fiber.StatusInternalServerError)
		}
		err = nil
	}
	status := c.Response().StatusCode()
	path := c.Path()
	level := slog.LevelInfo
	switch {
	case status >= 500:
		level = slog.LevelError
	case path == "/healthz" || path == "/metrics" || strings.HasPrefix(path, "/static/"):
		level = slog.LevelDebug
	}
	ctx := c.UserContext()
	if !s.log.Enabled(ctx, level) {
		return nil
	}
	attrs := []slog.Attr{
		slog.String("method", c.Method()), slog.String("path", path), slog.Int("status", status),
		slog.Duration("duration", time.Since(start)),
	}
	if u := userOf(c); u != nil {
		attrs = append(attrs, slog.Int64("user", u.ID))
	}
	s.log.LogAttrs(ctx, level, "request", attrs...)
	return nil
}
