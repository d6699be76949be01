// Command homework is the Homework server and its command-line tools.
// `homework help` lists the commands and `homework CMD --help` a command's
// flags with the environment variables they default from.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=..."; when it
// is not, buildVersion reads the module version or VCS revision from the
// build information.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	os.Exit(code)
}

// commandList is every command with its one-line summary, in the order
// `homework help` shows them.
var commandList = []struct{ name, args, summary string }{
	{"serve", "[flags]", "run the server: web UI, API and workers (the default command)"},
	{"user add", "--email E [--admin]", "create an account; the password is read from stdin"},
	{"user list", "", "list the accounts"},
	{"user passwd", "--email E", "set an account's password (read from stdin) and sign out its sessions"},
	{"token create", "--email E [--name N]", "create an API token and print it once"},
	{"token list", "--email E", "list an account's API tokens with their last use"},
	{"token revoke", "--email E --id ID", "revoke an API token"},
	{"tail", "RUN_ID [--since N]", "follow a run's events as they happen"},
	{"report", "[--since T] [--until T] [--group-by G] [--format F]", "print the effectiveness report (completion, false claims, cost)"},
	{"migrate", "", "apply database migrations and exit"},
	{"version", "", "print the version"},
	{"help", "[CMD]", "show this list, or a command's flags"},
}

// summary returns the one-line summary and argument synopsis of a command.
func summary(name string) (args, text string) {
	for _, c := range commandList {
		if c.name == name {
			return c.args, c.summary
		}
	}
	return "", ""
}

func usageText() string {
	var b strings.Builder
	b.WriteString("Homework runs long agent work iteration by iteration until a gate says it is done.\n\n")
	b.WriteString("usage: homework [CMD] [flags]\n\ncommands:\n")
	for _, c := range commandList {
		fmt.Fprintf(&b, "  %-14s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun `homework CMD --help` for a command's flags and their environment variables.\n")
	return b.String()
}

// helpShown is returned after a command printed its help: exit code 0.
type helpShown struct{ text string }

func (h *helpShown) Error() string { return "help requested" }

// run dispatches a command line and returns the process exit code: 0 on
// success, 2 on a usage error, 1 on any other failure.
func run(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, env, stdin, stdout, stderr)
	var ue *usageError
	var hs *helpShown
	switch {
	case err == nil:
		return 0
	case errors.As(err, &hs):
		fmt.Fprint(stdout, hs.text)
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

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

func dispatch(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch {
		case isHelpFlag(args[0]):
			return &helpShown{usageText()}
		case args[0] == "-version" || args[0] == "--version":
			fmt.Fprintln(stdout, "homework", buildVersion())
			return nil
		}
	}
	cmd := "serve"
	if len(args) > 0 && (len(args[0]) == 0 || args[0][0] != '-') {
		cmd, args = args[0], args[1:]
	}
	// A command with subcommands takes the next word.
	sub := func() string {
		if len(args) == 0 || isHelpFlag(args[0]) {
			return ""
		}
		s := args[0]
		args = args[1:]
		return s
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, env, stderr)
	case "user":
		switch sub() {
		case "add":
			return userAdd(ctx, args, env, stdin, stdout)
		case "list":
			return userList(ctx, args, env, stdout)
		case "passwd":
			return userPasswd(ctx, args, env, stdin, stdout)
		}
		if len(args) > 0 && isHelpFlag(args[0]) {
			return &helpShown{groupUsage("user")}
		}
		return usagef("usage: homework user add|list|passwd (see homework user --help)")
	case "token":
		switch sub() {
		case "create":
			return tokenCreate(ctx, args, env, stdout)
		case "list":
			return tokenList(ctx, args, env, stdout)
		case "revoke":
			return tokenRevoke(ctx, args, env, stdout)
		}
		if len(args) > 0 && isHelpFlag(args[0]) {
			return &helpShown{groupUsage("token")}
		}
		return usagef("usage: homework token create|list|revoke (see homework token --help)")
	case "migrate":
		return migrate(ctx, args, env, stdout)
	case "tail":
		return tail(ctx, args, env, stdout, stderr)
	case "report":
		return report(ctx, args, env, stdout)
	case "version":
		if err := parseFlags(newFlagSet("version"), args); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "homework", buildVersion())
		return nil
	case "help":
		if len(args) == 0 {
			return &helpShown{usageText()}
		}
		// `homework help user add` is `homework user add --help`.
		return dispatch(ctx, append(args, "--help"), env, stdin, stdout, stderr)
	}
	return usagef("unknown command %q (run homework help for the list)", cmd)
}

// groupUsage lists the subcommands of a command group such as "user".
func groupUsage(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: homework %s SUBCOMMAND [flags]\n\nsubcommands:\n", group)
	for _, c := range commandList {
		if rest, ok := strings.CutPrefix(c.name, group+" "); ok {
			fmt.Fprintf(&b, "  %-8s %s\n", rest, c.summary)
		}
	}
	fmt.Fprintf(&b, "\nRun `homework %s SUBCOMMAND --help` for its flags.\n", group)
	return b.String()
}

// buildVersion is the version set at build time, else the module version
// or the VCS revision (with the commit time, and "+dirty" for a modified
// tree) recorded in the build information, else "dev".
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return versionFromBuildInfo(bi)
}

func versionFromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	if at != "" {
		rev += " (" + at + ")"
	}
	return rev
}

func serve(ctx context.Context, args []string, env func(string) string, stderr io.Writer) error {
	cfg, err := parseServeConfig(args, env)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, cfg)
	m := NewMain(cfg, logger)
	if err := m.Run(ctx); err != nil {
		m.Close()
		return err
	}
	<-ctx.Done()
	logger.Info("shutting down")
	return m.Close()
}
