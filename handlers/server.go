// Package handlers maps HTTP requests to engine and store calls: the JSON
// API, the server-sent event streams and the HTML pages, with
// authentication, CSRF and one error-code-to-status table.
package handlers

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/filesystem"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"homework/engine"
	"homework/engine/llm/prices"
	"homework/engine/mcp"
	"homework/engine/spec"
	"homework/static"
	"homework/views"
)

// Options configure a Server.
type Options struct {
	DB      spec.Store // required: the store (see engine/spec/store.go)
	Engine  *engine.Engine
	Logger  *slog.Logger
	Version string
	// Registry collects /metrics; a new one is made when nil.
	Registry *prometheus.Registry
	// SecureCookies marks session cookies Secure (default true; tests on
	// plain HTTP loopback turn it off).
	InsecureCookies bool
	// Heartbeat is the SSE ping interval; default 15 s.
	Heartbeat time.Duration
	// WriteTimeout bounds every write to a client: a response must be
	// taken within it, and an event stream is cut when a write to it (an
	// event, a page of replay, a ping) is not taken within it — a client
	// that stops reading is let go, with its buffers. Default 30 s.
	WriteTimeout time.Duration
	// BodyLimit bounds request bodies; default 1 MiB.
	BodyLimit int
	// LLMConfigured tells pages whether a model endpoint is set.
	LLMConfigured bool
	// DefaultModel is shown in the composer.
	DefaultModel string
	// Prices is the server's price table, shown in the composer; the
	// built-in one when nil.
	Prices prices.Table
	// CommandRunsEnabled tells pages whether command runs are allowed.
	CommandRunsEnabled bool
	// ScriptRunsEnabled tells the composer that the engine has the scripted
	// test executor (spec.ExecutorScript); only then is its "script" field
	// shown and honoured.
	ScriptRunsEnabled bool
	// MaxRunsPerUser is the engine's running-runs limit per user, shown on
	// the run list; default 3 (the engine's default).
	MaxRunsPerUser int
	// MCP is the MCP servers LLM runs may use, listed by the API and the
	// composer; nil when none are configured.
	MCP *mcp.Config
}

// Server is the HTTP server.
type Server struct {
	opts   Options
	app    *fiber.App
	db     spec.Store
	engine *engine.Engine
	log    *slog.Logger

	// ctx is cancelled at shutdown so stream writers end promptly.
	ctx    context.Context
	cancel context.CancelFunc
	// streams are the open event streams, ended when their credential is
	// revoked.
	streams streamRegistry
	// verifier re-checks the streams' credentials before they send.
	verifier *verifier
	// beat is the streams' shared heartbeat.
	beat heartbeat
}

// New returns a server with every route registered.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.BodyLimit <= 0 {
		opts.BodyLimit = 1 << 20
	}
	if opts.MaxRunsPerUser <= 0 {
		opts.MaxRunsPerUser = 3
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{opts: opts, db: opts.DB, engine: opts.Engine, log: opts.Logger, ctx: ctx, cancel: cancel}
	s.verifier = &verifier{store: opts.DB, ctx: ctx, log: opts.Logger, clock: s.beat.ticks.Load, waiting: s.streams.waiting,
		ofUsers: func(users map[int64]bool) []credential {
			return s.streams.credentials(func(cr credential) bool { return users[cr.userID] })
		}}
	if opts.Engine != nil {
		bus := opts.Engine.Bus()
		s.verifier.clock = func() int64 { return bus.Published() + s.beat.ticks.Load() }
		bus.OnPublish(s.verifier.kick)
	}
	s.app = fiber.New(fiber.Config{
		AppName:     "homework",
		BodyLimit:   opts.BodyLimit,
		ReadTimeout: 30 * time.Second,
		// Per response; an event stream re-arms it before each write.
		WriteTimeout:          opts.WriteTimeout,
		IdleTimeout:           120 * time.Second,
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		StreamRequestBody:     false,
		// Most connections of a watched server are idle event streams:
		// give a connection's 4 KiB read buffer back to the pool once its
		// request is read, instead of holding it for the stream's life.
		ReduceMemoryUsage: true,
	})
	s.app.Use(s.requestLog)
	s.app.Use(recover.New(recover.Config{EnableStackTrace: false}))
	s.app.Use(s.securityHeaders)
	s.routes()
	if err := opts.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "homework_sse_streams", Help: "Open event streams (run streams and dashboard feeds)."},
		func() float64 { return float64(s.streams.count()) })); err != nil {
		return nil, err
	}
	return s, nil
}

// Serve serves HTTP on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.app.Listener(lingerListener{ln}) }

// Shutdown ends open streams, then stops the server, waiting at most until
// ctx ends for in-flight requests, for the streams to let their connections
// go, and for the streams' shared heartbeat and credential checks to exit.
func (s *Server) Shutdown(ctx context.Context) error {
	s.cancel()
	// Every stream looks at the context when poked, and one that begins
	// waiting after this sees it cancelled first.
	s.streams.wakeAll()
	err := s.app.ShutdownWithContext(ctx)
	// fasthttp does not wait for the streams' hijacked connections.
	if serr := s.streams.close(ctx); err == nil {
		err = serr
	}
	done := make(chan struct{})
	go func() {
		s.beat.stop()
		s.verifier.stop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

func (s *Server) routes() {
	app := s.app
	app.Get("/healthz", s.healthz)
	app.Get("/metrics", s.metricsHandler())
	app.Use("/static", filesystem.New(filesystem.Config{Root: http.FS(static.FS), MaxAge: 3600}))
	app.Get("/favicon.ico", s.favicon)
	s.apiRoutes(app.Group("/api", s.requireAPIUser))
	s.pageRoutes(app)
	app.Use(func(c *fiber.Ctx) error {
		if isAPI(c) && s.pathHasOtherMethods(c.Path(), c.Method()) {
			return fiber.NewError(fiber.StatusMethodNotAllowed, "Method "+c.Method()+" is not allowed here.")
		}
		return fiber.NewError(fiber.StatusNotFound, "No such page.")
	})
}

// pathHasOtherMethods reports whether a route other than method serves
// path (so the answer is 405, not 404).
func (s *Server) pathHasOtherMethods(path, method string) bool {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, r := range s.app.GetRoutes(true) {
		if r.Method == method || r.Method == fiber.MethodHead || r.Method == "USE" {
			continue
		}
		pat := strings.Split(strings.Trim(r.Path, "/"), "/")
		if len(pat) != len(segs) {
			continue
		}
		match := true
		for i, p := range pat {
			if !strings.HasPrefix(p, ":") && p != segs[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func (s *Server) healthz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := s.db.Ping(ctx); err != nil {
		s.log.Error("health check failed", "err", err)
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "unavailable"})
	}
	return c.JSON(fiber.Map{"status": "ok"})
}

// favicon serves the site's icon where browsers ask for it without a
// <link rel="icon">.
func (s *Server) favicon(c *fiber.Ctx) error {
	b, err := static.FS.ReadFile("favicon.ico")
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "image/x-icon")
	c.Set(fiber.HeaderCacheControl, "public, max-age=86400")
	return c.Send(b)
}

func (s *Server) metricsHandler() fiber.Handler {
	h := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
	return func(c *fiber.Ctx) error {
		h(c.Context())
		return nil
	}
}

// securityHeaders sets a strict Content-Security-Policy (our own scripts and
// styles only) and related headers on every response.
func (s *Server) securityHeaders(c *fiber.Ctx) error {
	c.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Referrer-Policy", "same-origin")
	c.Set("X-Frame-Options", "DENY")
	return c.Next()
}

// render writes a templ component as an HTML response.
func (s *Server) render(c *fiber.Ctx, status int, comp templ.Component) error {
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	ctx := c.UserContext()
	if ctx == nil {
		ctx = context.Background()
	}
	return comp.Render(ctx, c.Response().BodyWriter())
}

func (s *Server) renderError(c *fiber.Ctx, status int, msg string) error {
	return s.render(c, status, views.ErrorPage(s.page(c, views.StatusTitle(status)), status, msg))
}

// page returns the layout data for the current request.
func (s *Server) page(c *fiber.Ctx, title string) views.Page {
	return s.pageFrom(c, s.db, title)
}

// pageFrom returns the layout data for the current request, read from r:
// a page that reads in a ReadTx reads its layout in the same snapshot.
func (s *Server) pageFrom(c *fiber.Ctx, r spec.ReadStore, title string) views.Page {
	p := views.Page{Title: title}
	if u := userOf(c); u != nil {
		p.UserEmail = u.Email
		if n, err := r.CountUnread(c.UserContext(), u.ID); err == nil {
			p.Unread = n
		}
		if id, err := r.LastUserEventID(c.UserContext(), u.ID); err == nil {
			p.FeedSince = id
		}
	}
	if sess := sessionOf(c); sess != nil {
		p.CSRF = sess.CSRFToken
	}
	if c.Route().Path == "/runs/:id" && c.Method() == fiber.MethodGet {
		p.ViewingRun = c.Params("id")
	}
	return p
}
