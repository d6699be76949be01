package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"homework/db/pg"
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
	AllowCommandRuns string // root directory for command runs; "" = disabled
	MaxRunsPerUser   int
	WebFetchHosts    []string
	ScriptExecutor   bool // testing: enable the scripted executor
	InsecureCookies  bool
	ShutdownTimeout  time.Duration
	LeaseTTL         time.Duration
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
	if pg.IsURL(def) {
		fs.Lookup("db").DefValue = pg.Redact(def) // usage never shows the password
	}
	return v
}

// newFlagSet returns a flag set that reports errors as one line.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.PrintDefaults()
			return err
		}
		return usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

// parseServeConfig reads serve's flags and environment.
func parseServeConfig(args []string, env func(string) string) (*Config, error) {
	fs := newFlagSet("serve")
	cfg := &Config{}
	addr := getenv(env, "HOMEWORK_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	fs.StringVar(&cfg.Addr, "addr", addr, "listen address (env HOMEWORK_ADDR)")
	dbPath := dbFlag(fs, env)
	workersDef := 4
	if v := env("HOMEWORK_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 256 {
			return nil, usagef("HOMEWORK_WORKERS must be a whole number from 1 to 256, got %q", v)
		}
		workersDef = n
	}
	fs.IntVar(&cfg.Workers, "workers", workersDef, "iterations worked at once (env HOMEWORK_WORKERS)")
	fs.StringVar(&cfg.LLMBaseURL, "llm-base-url", getenv(env, "HOMEWORK_LLM_BASE_URL", "OPENAI_BASE_URL"), "OpenAI-compatible endpoint, ending in /v1 (env HOMEWORK_LLM_BASE_URL, OPENAI_BASE_URL)")
	fs.StringVar(&cfg.LLMAPIKey, "llm-api-key", getenv(env, "HOMEWORK_LLM_API_KEY", "OPENAI_API_KEY"), "API key (env HOMEWORK_LLM_API_KEY, OPENAI_API_KEY)")
	fs.StringVar(&cfg.LLMModel, "llm-model", getenv(env, "HOMEWORK_LLM_MODEL"), "default model (env HOMEWORK_LLM_MODEL)")
	fs.StringVar(&cfg.PricesFile, "prices", getenv(env, "HOMEWORK_PRICES"), "JSON price table overriding the built-in one (env HOMEWORK_PRICES)")
	fs.StringVar(&cfg.AllowCommandRuns, "allow-command-runs", getenv(env, "HOMEWORK_ALLOW_COMMAND_RUNS"), "enable command runs for admins in work directories under this root")
	maxRuns := 3
	if v := env("HOMEWORK_MAX_RUNS_PER_USER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, usagef("HOMEWORK_MAX_RUNS_PER_USER must be a positive whole number, got %q", v)
		}
		maxRuns = n
	}
	fs.IntVar(&cfg.MaxRunsPerUser, "max-runs-per-user", maxRuns, "runs running at once per user; the rest queue")
	webHosts := fs.String("web-fetch-hosts", getenv(env, "HOMEWORK_WEB_FETCH_HOSTS"), "comma-separated hosts the web_fetch tool may read (off when empty)")
	fs.BoolVar(&cfg.ScriptExecutor, "script-executor", env("HOMEWORK_SCRIPT_EXECUTOR") == "1", "enable the scripted executor (testing)")
	fs.BoolVar(&cfg.InsecureCookies, "insecure-cookies", false, "send session cookies without Secure (plain-HTTP development only)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "how long shutdown may take")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", 15*time.Second, "run lease length; a crashed server's runs are recovered at the next start")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg.DBPath = *dbPath
	if cfg.Addr == "" {
		return nil, usagef("--addr must not be empty")
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
	if cfg.ShutdownTimeout <= 0 || cfg.LeaseTTL < time.Second {
		return nil, usagef("--shutdown-timeout must be positive and --lease-ttl at least 1s")
	}
	if u := cfg.LLMBaseURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return nil, usagef("--llm-base-url must start with http:// or https://, got %q", u)
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
	}
	return cfg, nil
}
