package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"homework/db/bind"
	"homework/engine"
	"homework/engine/agentcmd"
	"homework/engine/llm"
	"homework/engine/scripted"
	"homework/engine/spec"
	"homework/handlers"
)

// Main is the whole server: configuration, store, engine and HTTP server.
// Tests start it on 127.0.0.1:0 with a database under t.TempDir().
type Main struct {
	Config *Config
	Logger *slog.Logger

	Store  *bind.Store // the store --db names
	Bus    *engine.Bus
	Engine *engine.Engine
	Server *handlers.Server

	engine    atomic.Pointer[engine.Engine] // m.Engine, for the store's listener
	ln        net.Listener
	serveDone chan error
	closeOnce sync.Once
	closeErr  error
}

// NewMain returns a Main for cfg.
func NewMain(cfg *Config, logger *slog.Logger) *Main {
	return &Main{Config: cfg, Logger: logger}
}

// Run opens the database (taking its lock), starts the engine and begins
// serving HTTP. It returns once the server listens.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	m.Bus = engine.NewBus()
	var err error
	// Several processes may serve one PostgreSQL database: the lock is
	// SQLite's alone.
	m.Store, err = bind.Open(ctx, bind.Options{URL: cfg.DBPath, Serve: true,
		Publish: engine.NewRelay(m.Bus, m.Logger.With("component", "events")).Deliver,
		OnInterrupt: func(runID string) {
			if e := m.engine.Load(); e != nil {
				e.CancelLocal(runID)
			}
		},
		OnListenError: func(err error) { m.Logger.Warn("event listener reconnecting", "component", "events", "err", err) }})
	if errors.Is(err, bind.ErrLocked) {
		return fmt.Errorf("%w: another `homework serve` is using %s; stop it first", err, cfg.DBPath)
	} else if err != nil {
		return err
	}
	store, backend, dbName := m.Store, m.Store.Backend, m.Store.Name

	executors, llmConfigured, err := m.executors()
	if err != nil {
		return err
	}
	eopts := engine.Options{
		Backend: backend, Bus: m.Bus, Executors: executors, Logger: m.Logger,
		Workers: cfg.Workers, MaxConcurrentPerUser: cfg.MaxRunsPerUser, LeaseTTL: cfg.LeaseTTL,
		RecoveryInterval:   max(cfg.LeaseTTL/3, 500*time.Millisecond),
		ShutdownGrace:      cfg.ShutdownGrace,
		CommandRunsAllowed: cfg.AllowCommandRuns != "",
		CommandHost:        cfg.HostID,
		CommandRoot:        commandRoot(cfg.AllowCommandRuns),
		// On PostgreSQL other processes work the same runs: recovery takes
		// only what dead or silent processes left, and a canceled run's
		// iteration may run in another process.
		SharedStore: m.Store.Shared,

		PublicURL:           cfg.PublicURL,
		WebhookAllowHTTP:    cfg.WebhookAllowHTTP,
		WebhookAllowPrivate: cfg.WebhookAllowPrivate,
	}
	m.Engine, err = engine.New(eopts)
	if err != nil {
		return err
	}
	m.engine.Store(m.Engine)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := m.Engine.Register(reg); err != nil {
		return err
	}
	m.Server, err = handlers.New(handlers.Options{
		DB: store, Engine: m.Engine, Logger: m.Logger.With("component", "http"), Version: buildVersion(), Registry: reg,
		InsecureCookies: cfg.InsecureCookies, LLMConfigured: llmConfigured, DefaultModel: cfg.LLMModel,
		CommandRunsEnabled: cfg.AllowCommandRuns != "", MaxRunsPerUser: cfg.MaxRunsPerUser,
		ScriptRunsEnabled: cfg.ScriptExecutor, Prices: m.Config.Prices, WriteTimeout: cfg.WriteTimeout, MCP: cfg.MCP,
	})
	if err != nil {
		return err
	}
	if err := m.Engine.Start(ctx); err != nil {
		return err
	}
	m.ln, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	m.serveDone = make(chan error, 1)
	go func() { m.serveDone <- m.Server.Serve(m.ln) }()

	endpoint := "not configured (LLM runs are refused until HOMEWORK_LLM_BASE_URL or HOMEWORK_LLM_API_KEY is set)"
	if llmConfigured {
		endpoint = "configured"
	}
	m.Logger.Info("homework listening", "addr", "http://"+m.ln.Addr().String(), "db", dbName,
		"workers", cfg.Workers, "model_endpoint", endpoint, "base_url", cfg.LLMBaseURL, "model", cfg.LLMModel,
		"command_runs", cfg.AllowCommandRuns != "", "version", buildVersion())
	if msg := cookieWarning(cfg); msg != "" {
		m.Logger.Warn(msg, "addr", cfg.Addr)
	}
	return nil
}

// commandRoot is the command-run root as recorded for command runs bound to
// this host: absolute and clean, so two spellings of one directory are one
// queue. "" when command runs are off.
func commandRoot(root string) string {
	if root == "" {
		return ""
	}
	if abs, err := filepath.Abs(root); err == nil {
		return abs
	}
	return filepath.Clean(root)
}

// cookieWarning is the start-up warning for a server that browsers on other
// machines cannot sign in to: it listens beyond loopback and sends Secure
// cookies, which browsers return only over HTTPS. "" when there is nothing
// to warn about.
func cookieWarning(cfg *Config) string {
	if cfg.InsecureCookies || loopbackOnly(cfg.Addr) {
		return ""
	}
	return "session cookies are Secure, so browsers reaching this server over plain HTTP (not localhost) cannot sign in: " +
		"put a TLS proxy in front (HTTPS), or on a trusted network start with --insecure-cookies (HOMEWORK_INSECURE_COOKIES=1)"
}

// loopbackOnly reports whether addr listens on loopback only.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr returns the address the server listens on.
func (m *Main) Addr() string { return m.ln.Addr().String() }

// executors builds the executors this server offers.
func (m *Main) executors() (map[string]engine.Executor, bool, error) {
	out := map[string]engine.Executor{}
	prices := m.Config.Prices
	if prices == nil && m.Config.PricesFile != "" {
		p, err := llm.LoadPrices(m.Config.PricesFile)
		if err != nil {
			return nil, false, fmt.Errorf("price table: %w", err)
		}
		prices = p
	}
	if prices == nil {
		prices = llm.DefaultPrices()
	}
	// The pages show the table the executors price with.
	m.Config.Prices = prices
	x, err := llm.New(llm.Options{
		Store: m.Store, BaseURL: m.Config.LLMBaseURL, APIKey: m.Config.LLMAPIKey, DefaultModel: m.Config.LLMModel,
		Prices: prices, Logger: m.Logger.With("component", "llm"), MCP: m.Config.MCP,
		WebFetch: llm.WebFetchOptions{Enabled: len(m.Config.WebFetchHosts) > 0, AllowHosts: m.Config.WebFetchHosts},
		RecordNarration: func(ctx context.Context, run *spec.Run, c spec.LLMCall) error {
			return m.Engine.RecordLLMCall(ctx, run, c)
		},
	})
	if err != nil {
		return nil, false, err
	}
	out[spec.ExecutorLLM] = x
	if m.Config.AllowCommandRuns != "" {
		out[spec.ExecutorCommand] = agentcmd.New(agentcmd.Options{Root: m.Config.AllowCommandRuns, Prices: prices})
	}
	if m.Config.ScriptExecutor {
		out[spec.ExecutorScript] = &scripted.Executor{InTx: m.Store.WriteTx}
	}
	return out, x.Configured(), nil
}

// Close shuts down in order, each step bounded: the HTTP server (streams
// first), then the engine (in-flight iterations get a grace period), then
// the database.
func (m *Main) Close() error {
	m.closeOnce.Do(func() {
		timeout := m.Config.ShutdownTimeout
		if timeout <= 0 {
			timeout = 20 * time.Second
		}
		deadline := time.Now().Add(timeout)
		var errs []error
		if m.Server != nil {
			// Streams end at once; requests get what the engine's grace
			// leaves of the bound.
			ctx, cancel := context.WithTimeout(context.Background(), max(timeout-m.Config.ShutdownGrace, timeout/4))
			errs = append(errs, m.Server.Shutdown(ctx))
			cancel()
			if m.ln != nil {
				// Shutdown only closes listeners Serve has registered; a
				// Serve goroutine that has not run yet must still stop.
				m.ln.Close()
			}
			if m.serveDone != nil {
				select {
				case <-m.serveDone:
				case <-time.After(timeout / 2):
					errs = append(errs, errors.New("http server did not stop serving in time"))
				}
			}
		}
		if m.Engine != nil {
			// The engine gets the rest: its grace, then the cancel of what
			// is left.
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			errs = append(errs, m.Engine.Stop(ctx))
			cancel()
		}
		if m.Store != nil {
			errs = append(errs, m.Store.Close())
		}
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}
