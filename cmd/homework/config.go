package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"homework/db/bind"
	"homework/engine"
	"homework/engine/llm"
	"homework/engine/mcp"
)

// Config is the server's configuration from flags and environment. Flags
// win over the environment, which wins over the defaults.
type Config struct {
	Addr             string
	DBPath           string
	Workers          int
	LLMBaseURL       string
	LLMAPIKey        string
	LLMModel         string
	PricesFile       string
	MCPConfigFile    string // the mcpServers file; "" = no MCP servers
	AllowCommandRuns string // root directory for command runs; "" = disabled
	HostID           string // this machine's name among processes sharing a PostgreSQL database
	MaxRunsPerUser   int
	WebFetchHosts    []string
	ScriptExecutor   bool // testing: enable the scripted executor
	InsecureCookies  bool
	ShutdownTimeout  time.Duration
	WriteTimeout     time.Duration
	ShutdownGrace    time.Duration // in-flight iterations get this long to finish on shutdown
	LeaseTTL         time.Duration
	LogFormat        string        // "text" or "json"
	LogRepeats       time.Duration // a warning or error repeated within this is counted, not logged again
	LogLevel         slog.Level

	// PublicURL is how people reach the server (the links in webhook
	// deliveries); default http:// and the listen address.
	PublicURL           string
	WebhookAllowHTTP    bool // webhook endpoints may be http://, not only https://
	WebhookAllowPrivate bool // webhooks may be delivered to loopback, private, link-local and multicast addresses

	// Prices is the price table read from PricesFile when the flags were
	// parsed (nil: the built-in table), so a broken file is a usage error
	// before anything starts.
	Prices llm.PriceTable
	// MCP is the MCP servers read from MCPConfigFile when the flags were
	// parsed (nil: none), so a broken file fails before anything starts.
	MCP *mcp.Config
}

// usageError is a bad flag or value: one line, exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func getenv(env func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := env(k); v != "" {
			return v
		}
	}
	return ""
}

// dbFlag adds --db with the environment default to fs.
func dbFlag(fs *flag.FlagSet, env func(string) string) *string {
	def := getenv(env, "HOMEWORK_DB")
	if def == "" {
		def = "./homework.db"
	}
	v := fs.String("db", def, "SQLite database file, or a postgres:// URL (env HOMEWORK_DB)")
	if bind.Shared(def) {
		fs.Lookup("db").DefValue = bind.Redact(def) // usage never shows the password
	}
	return v
}

// newFlagSet returns a flag set that reports errors as one line.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args. Asked for help (-h, --help) it returns a
// *helpShown with the command's synopsis, summary and flags; a bad flag is
// a one-line usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &helpShown{flagHelp(fs)}
		}
		return usagef("%s: %v (see homework %s --help)", fs.Name(), err, fs.Name())
	}
	return nil
}

// flagHelp is a command's help: synopsis, summary and every flag with its
// default and environment variable.
func flagHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	synopsis, text := summary(fs.Name())
	fmt.Fprintf(&b, "usage: homework %s %s\n", fs.Name(), synopsis)
	if text != "" {
		fmt.Fprintf(&b, "\n%s.\n", strings.ToUpper(text[:1])+text[1:])
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nflags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return b.String()
}

// envValues reads typed environment values, keeping the first bad one as a
// usage error naming the variable.
type envValues struct {
	env func(string) string
	err error
}

func (e *envValues) fail(key, want, got string) {
	if e.err == nil {
		e.err = usagef("%s must be %s, got %q", key, want, got)
	}
}

func (e *envValues) int(key string, def, lo, hi int) int {
	v := e.env(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		e.fail(key, fmt.Sprintf("a whole number from %d to %d", lo, hi), v)
		return def
	}
	return n
}

func (e *envValues) duration(key string, def time.Duration) time.Duration {
	v := e.env(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.fail(key, "a positive duration such as 30s", v)
		return def
	}
	return d
}

func (e *envValues) bool(key string) bool {
	v := e.env(key)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(key, "true or false (or 1 or 0)", v)
	}
	return b
}

// checkAddr refuses a listen address net.Listen would refuse later, so a
// typo fails before the database is opened.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--addr must be host:port such as 127.0.0.1:8080 or :8080, got %q", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return usagef("--addr: the port must be a number from 0 to 65535, got %q", port)
	}
	if strings.ContainsAny(host, " /?#@") {
		return usagef("--addr: %q is not a host name or IP address", host)
	}
	return nil
}

// parseLogLevel reads debug, info, warn or error.
func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// newLogger returns the server's logger in cfg's format and level.
func newLogger(w io.Writer, cfg *Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(engine.QuietRepeats(h, cfg.LogRepeats))
}

// parseServeConfig reads serve's flags and environment. Every bad value is
// a one-line usage error, found before anything starts.
func parseServeConfig(args []string, env func(string) string) (*Config, error) {
	fs := newFlagSet("serve")
	cfg := &Config{}
	ev := &envValues{env: env}
	fs.StringVar(&cfg.Addr, "addr", orDefault(env("HOMEWORK_ADDR"), "127.0.0.1:8080"), "listen address host:port (env HOMEWORK_ADDR)")
	dbPath := dbFlag(fs, env)
	fs.IntVar(&cfg.Workers, "workers", ev.int("HOMEWORK_WORKERS", 4, 1, 256), "iterations worked at once, 1 to 256 (env HOMEWORK_WORKERS)")
	fs.StringVar(&cfg.LLMBaseURL, "llm-base-url", getenv(env, "HOMEWORK_LLM_BASE_URL", "OPENAI_BASE_URL"), "OpenAI-compatible endpoint, ending in /v1 (env HOMEWORK_LLM_BASE_URL, OPENAI_BASE_URL)")
	fs.StringVar(&cfg.LLMAPIKey, "llm-api-key", getenv(env, "HOMEWORK_LLM_API_KEY", "OPENAI_API_KEY"), "API key (env HOMEWORK_LLM_API_KEY, OPENAI_API_KEY)")
	fs.StringVar(&cfg.LLMModel, "llm-model", getenv(env, "HOMEWORK_LLM_MODEL"), "default model (env HOMEWORK_LLM_MODEL)")
	fs.StringVar(&cfg.PricesFile, "prices", getenv(env, "HOMEWORK_PRICES"), "JSON price table overriding the built-in one (env HOMEWORK_PRICES)")
	fs.StringVar(&cfg.MCPConfigFile, "mcp-config", getenv(env, "HOMEWORK_MCP_CONFIG"), "MCP servers LLM runs may use, as {\"mcpServers\": {…}}; ${VAR} in env and headers is read from this environment (env HOMEWORK_MCP_CONFIG)")
	fs.StringVar(&cfg.AllowCommandRuns, "allow-command-runs", getenv(env, "HOMEWORK_ALLOW_COMMAND_RUNS"), "enable command runs for admins in work directories under this root (env HOMEWORK_ALLOW_COMMAND_RUNS)")
	hostname, _ := os.Hostname()
	fs.StringVar(&cfg.HostID, "host-id", orDefault(env("HOMEWORK_HOST_ID"), hostname), "this machine's name on a shared PostgreSQL database: command runs created here run only on processes with the same host id and --allow-command-runs root (env HOMEWORK_HOST_ID; default the hostname)")
	fs.IntVar(&cfg.MaxRunsPerUser, "max-runs-per-user", ev.int("HOMEWORK_MAX_RUNS_PER_USER", 3, 1, 1000), "runs running at once per user; the rest queue (env HOMEWORK_MAX_RUNS_PER_USER)")
	webHosts := fs.String("web-fetch-hosts", getenv(env, "HOMEWORK_WEB_FETCH_HOSTS"), "comma-separated hosts the web_fetch tool may read, off when empty (env HOMEWORK_WEB_FETCH_HOSTS)")
	fs.BoolVar(&cfg.ScriptExecutor, "script-executor", ev.bool("HOMEWORK_SCRIPT_EXECUTOR"), "enable the scripted executor, for testing (env HOMEWORK_SCRIPT_EXECUTOR)")
	fs.BoolVar(&cfg.InsecureCookies, "insecure-cookies", ev.bool("HOMEWORK_INSECURE_COOKIES"), "send session cookies without Secure, for plain HTTP on a LAN; prefer TLS in front (env HOMEWORK_INSECURE_COOKIES)")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", ev.duration("HOMEWORK_WRITE_TIMEOUT", 30*time.Second), "how long a client may take to accept a write; an event stream whose client stops reading is cut after it (env HOMEWORK_WRITE_TIMEOUT)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", ev.duration("HOMEWORK_SHUTDOWN_TIMEOUT", 20*time.Second), "how long shutdown may take (env HOMEWORK_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", ev.duration("HOMEWORK_SHUTDOWN_GRACE", 10*time.Second), "how long in-flight iterations may finish on shutdown before they are canceled and left to recovery, within --shutdown-timeout (env HOMEWORK_SHUTDOWN_GRACE)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", ev.duration("HOMEWORK_LEASE_TTL", 15*time.Second), "run lease length; a crashed server's runs are recovered at the next start (env HOMEWORK_LEASE_TTL)")
	fs.StringVar(&cfg.LogFormat, "log-format", orDefault(env("HOMEWORK_LOG_FORMAT"), "text"), "log format: text or json (env HOMEWORK_LOG_FORMAT)")
	fs.DurationVar(&cfg.LogRepeats, "log-repeats", ev.duration("HOMEWORK_LOG_REPEATS", 10*time.Second), "a warning or error repeated within this long (same component and message, as in an outage) is counted and said once with its count; 0 logs every one (env HOMEWORK_LOG_REPEATS)")
	fs.StringVar(&cfg.PublicURL, "public-url", env("HOMEWORK_PUBLIC_URL"), "the server's address as people reach it, for the run links in webhooks, such as https://homework.example.com (env HOMEWORK_PUBLIC_URL; default http:// and --addr)")
	fs.BoolVar(&cfg.WebhookAllowHTTP, "webhook-allow-http", ev.bool("HOMEWORK_WEBHOOK_ALLOW_HTTP"), "accept http:// webhook endpoints, not only https:// (env HOMEWORK_WEBHOOK_ALLOW_HTTP)")
	fs.BoolVar(&cfg.WebhookAllowPrivate, "webhook-allow-private", ev.bool("HOMEWORK_WEBHOOK_ALLOW_PRIVATE"), "deliver webhooks to loopback, private, link-local and multicast addresses, refused otherwise (env HOMEWORK_WEBHOOK_ALLOW_PRIVATE)")
	logLevel := fs.String("log-level", orDefault(env("HOMEWORK_LOG_LEVEL"), "info"), "log level: debug, info, warn or error (env HOMEWORK_LOG_LEVEL)")
	if ev.err != nil {
		return nil, ev.err
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg.DBPath = *dbPath
	if err := checkAddr(cfg.Addr); err != nil {
		return nil, err
	}
	if cfg.PublicURL == "" {
		host, port, _ := net.SplitHostPort(cfg.Addr)
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "localhost"
		}
		cfg.PublicURL = "http://" + net.JoinHostPort(host, port)
	} else if u, err := url.Parse(cfg.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--public-url must be an absolute http:// or https:// URL, got %q", cfg.PublicURL)
	}
	if cfg.DBPath == "" {
		return nil, usagef("--db must not be empty")
	}
	if cfg.Workers < 1 || cfg.Workers > 256 {
		return nil, usagef("--workers must be from 1 to 256, got %d", cfg.Workers)
	}
	if cfg.MaxRunsPerUser < 1 || cfg.MaxRunsPerUser > 1000 {
		return nil, usagef("--max-runs-per-user must be from 1 to 1000, got %d", cfg.MaxRunsPerUser)
	}
	if cfg.WriteTimeout < time.Second {
		return nil, usagef("--write-timeout must be at least 1s, got %v", cfg.WriteTimeout)
	}
	if cfg.LogRepeats < 0 {
		return nil, usagef("--log-repeats must not be negative, got %v", cfg.LogRepeats)
	}
	if cfg.ShutdownTimeout <= 0 {
		return nil, usagef("--shutdown-timeout must be positive, got %v", cfg.ShutdownTimeout)
	}
	if cfg.LeaseTTL < time.Second {
		return nil, usagef("--lease-ttl must be at least 1s, got %v", cfg.LeaseTTL)
	}
	graceSet := env("HOMEWORK_SHUTDOWN_GRACE") != ""
	fs.Visit(func(f *flag.Flag) { graceSet = graceSet || f.Name == "shutdown-grace" })
	if !graceSet {
		// The default grace fits any shutdown bound.
		cfg.ShutdownGrace = min(cfg.ShutdownGrace, cfg.ShutdownTimeout/2)
	}
	if cfg.ShutdownGrace <= 0 || cfg.ShutdownGrace >= cfg.ShutdownTimeout {
		return nil, usagef("--shutdown-grace must be positive and shorter than --shutdown-timeout (%s), got %s", cfg.ShutdownTimeout, cfg.ShutdownGrace)
	}
	if u := cfg.LLMBaseURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return nil, usagef("--llm-base-url must start with http:// or https://, got %q", u)
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return nil, usagef("--log-format must be text or json, got %q", cfg.LogFormat)
	}
	var err error
	if cfg.LogLevel, err = parseLogLevel(*logLevel); err != nil {
		return nil, err
	}
	if *webHosts != "" {
		for _, h := range strings.Split(*webHosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				cfg.WebFetchHosts = append(cfg.WebFetchHosts, h)
			}
		}
	}
	if cfg.AllowCommandRuns != "" {
		st, err := os.Stat(cfg.AllowCommandRuns)
		if err != nil || !st.IsDir() {
			return nil, usagef("--allow-command-runs: %q is not a directory", cfg.AllowCommandRuns)
		}
		if bind.Shared(cfg.DBPath) && strings.TrimSpace(cfg.HostID) == "" {
			return nil, usagef("--host-id must not be empty with --allow-command-runs on PostgreSQL")
		}
	}
	if len(cfg.HostID) > 200 || strings.ContainsAny(cfg.HostID, "\x00\r\n") {
		return nil, usagef("--host-id must be one line of at most 200 bytes")
	}
	if cfg.PricesFile != "" {
		p, err := llm.LoadPrices(cfg.PricesFile)
		if err != nil {
			return nil, usagef("--prices: %s", oneLine(err.Error(), 300))
		}
		cfg.Prices = p
	}
	if cfg.MCPConfigFile != "" {
		c, err := mcp.LoadFile(cfg.MCPConfigFile, env)
		if err != nil {
			return nil, usagef("--mcp-config: %s", oneLine(err.Error(), 500))
		}
		cfg.MCP = c
	}
	return cfg, nil
}
