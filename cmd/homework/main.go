// Command homework is the Homework server and its command-line tools.
//
//	homework [serve] [--addr A] [--db F] [--workers N] ...
//	homework user add --email E [--admin]        (password on stdin)
//	homework token create --email E [--name N]   (prints the token once)
//	homework token list --email E
//	homework token revoke --email E --id ID
//	homework tail RUN_ID [--since N] [--server URL] [--token T]
//	homework report [--since T] [--until T] [--group-by G] [--format table|json|csv]
//	homework migrate
//	homework version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	os.Exit(code)
}

// run dispatches a command line and returns the process exit code: 0 on
// success, 2 on a usage error, 1 on any other failure.
func run(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, env, stdin, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "homework:", ue.msg)
		return 2
	default:
		fmt.Fprintln(stderr, "homework:", err)
		return 1
	}
}

func dispatch(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (len(args[0]) == 0 || args[0][0] != '-') {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, env, stderr)
	case "user":
		if len(args) == 0 || args[0] != "add" {
			return usagef("usage: homework user add --email E [--admin] (password on stdin)")
		}
		return userAdd(ctx, args[1:], env, stdin, stdout)
	case "token":
		switch {
		case len(args) > 0 && args[0] == "create":
			return tokenCreate(ctx, args[1:], env, stdout)
		case len(args) > 0 && args[0] == "list":
			return tokenList(ctx, args[1:], env, stdout)
		case len(args) > 0 && args[0] == "revoke":
			return tokenRevoke(ctx, args[1:], env, stdout)
		}
		return usagef("usage: homework token create|list|revoke --email E [--name N] [--id ID]")
	case "migrate":
		return migrate(ctx, args, env, stdout)
	case "tail":
		return tail(ctx, args, env, stdout, stderr)
	case "report":
		return report(ctx, args, env, stdout)
	case "version":
		fmt.Fprintln(stdout, "homework", version)
		return nil
	case "help":
		fmt.Fprintln(stdout, "usage: homework [serve|user add|token create|token list|token revoke|tail|report|migrate|version] [flags]")
		return nil
	}
	return usagef("unknown command %q (try: serve, user add, token create, tail, report, migrate, version)", cmd)
}

func serve(ctx context.Context, args []string, env func(string) string, stderr io.Writer) error {
	cfg, err := parseServeConfig(args, env)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m := NewMain(cfg, logger)
	if err := m.Run(ctx); err != nil {
		m.Close()
		return err
	}
	<-ctx.Done()
	logger.Info("shutting down")
	return m.Close()
}
