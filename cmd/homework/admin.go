package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/mail"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"homework/db/bind"
	"homework/engine/spec"
)

// MinPasswordLength is the shortest accepted password.
const MinPasswordLength = 8

// HashPassword hashes a password with bcrypt.
func HashPassword(pw string) (string, error) {
	if len(pw) < MinPasswordLength {
		return "", fmt.Errorf("password must be at least %d characters", MinPasswordLength)
	}
	if len(pw) > 72 {
		return "", errors.New("password must be at most 72 bytes")
	}
	b, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	return string(b), err
}

// openShort opens the store named by --db for one command: a PostgreSQL
// database for a postgres:// or postgresql:// URL, a SQLite file otherwise.
// Both apply pending migrations; neither takes the server's lock.
func openShort(ctx context.Context, path string) (spec.Store, error) {
	s, err := bind.Open(ctx, bind.Options{URL: path})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func userAdd(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("user add")
	email := fs.String("email", "", "the account's email")
	admin := fs.Bool("admin", false, "make the account an admin")
	dbPath := dbFlag(fs, env)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	addr, err := mail.ParseAddress(*email)
	if *email == "" || err != nil || addr.Address != strings.TrimSpace(*email) {
		return usagef("user add: --email must be a valid email address")
	}
	hash, err := readPassword(fs.Name(), stdin)
	if err != nil {
		return err
	}
	d, err := openShort(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer d.Close()
	u, err := d.CreateUser(ctx, addr.Address, hash, *admin)
	if err != nil {
		return errors.New(spec.ErrorMessage(err))
	}
	role := "user"
	if u.IsAdmin {
		role = "admin"
	}
	fmt.Fprintf(stdout, "created %s %s (id %d)\n", role, u.Email, u.ID)
	return nil
}

// readPassword reads one line from stdin and hashes it; a password too
// short or too long is a usage error.
func readPassword(cmd string, stdin io.Reader) (string, error) {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	hash, err := HashPassword(strings.TrimRight(line, "\r\n"))
	if err != nil {
		return "", usagef("%s: %v (the password is read from stdin)", cmd, err)
	}
	return hash, nil
}

func userList(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlagSet("user list")
	dbPath := dbFlag(fs, env)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("user list: unexpected argument %q", fs.Arg(0))
	}
	d, err := openShort(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer d.Close()
	users, err := d.ListUsers(ctx)
	if err != nil {
		return err
	}
	if len(users) == 0 {
		fmt.Fprintln(stdout, "no accounts yet: create one with `homework user add --email E --admin` (password on stdin) or open /setup")
		return nil
	}
	for _, u := range users {
		role := "user"
		if u.IsAdmin {
			role = "admin"
		}
		fmt.Fprintf(stdout, "%d\t%s\t%s\tcreated %s\n", u.ID, u.Email, role, u.CreatedAt.Format(time.RFC3339))
	}
	return nil
}

func userPasswd(ctx context.Context, args []string, env func(string) string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("user passwd")
	email := fs.String("email", "", "the account's email")
	dbPath := dbFlag(fs, env)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *email == "" {
		return usagef("user passwd: --email is required")
	}
	hash, err := readPassword(fs.Name(), stdin)
	if err != nil {
		return err
	}
	d, err := openShort(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer d.Close()
	u, err := d.SetPassword(ctx, *email, hash)
	if err != nil {
		if spec.ErrorCode(err) == spec.ENOTFOUND {
			return fmt.Errorf("no user with email %s", *email)
		}
		return err
	}
	fmt.Fprintf(stdout, "changed the password of %s and signed out its browser sessions\n", u.Email)
	return nil
}

func tokenCreate(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlagSet("token create")
	email := fs.String("email", "", "the account's email")
	name := fs.String("name", "", "a name to recognise the token by")
	dbPath := dbFlag(fs, env)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *email == "" {
		return usagef("token create: --email is required")
	}
	if len(*name) > 100 {
		return usagef("token create: --name is too long")
	}
	d, err := openShort(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer d.Close()
	u, err := d.FindUserByEmail(ctx, *email)
	if err != nil {
		return fmt.Errorf("no user with email %s", *email)
	}
	secret, _, err := d.CreateAPIToken(ctx, u.ID, *name)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, secret)
	return nil
}

// openForUser parses --email and --db, opens the database and finds the user.
func openForUser(ctx context.Context, fs *flag.FlagSet, args []string, env func(string) string) (spec.Store, *spec.User, error) {
	email := fs.String("email", "", "the account's email")
	dbPath := dbFlag(fs, env)
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, err
	}
	if *email == "" {
		return nil, nil, usagef("%s: --email is required", fs.Name())
	}
	d, err := openShort(ctx, *dbPath)
	if err != nil {
		return nil, nil, err
	}
	u, err := d.FindUserByEmail(ctx, *email)
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("no user with email %s", *email)
	}
	return d, u, nil
}

func tokenList(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	d, u, err := openForUser(ctx, newFlagSet("token list"), args, env)
	if err != nil {
		return err
	}
	defer d.Close()
	toks, err := d.ListAPITokens(ctx, u.ID)
	if err != nil {
		return err
	}
	for _, t := range toks {
		used, state := "never used", "active"
		if !t.LastUsedAt.IsZero() {
			used = "last used " + t.LastUsedAt.Format(time.RFC3339)
		}
		if !t.RevokedAt.IsZero() {
			state = "revoked " + t.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "%d\t%q\tcreated %s\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339), used, state)
	}
	return nil
}

func tokenRevoke(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlagSet("token revoke")
	id := fs.Int64("id", 0, "the token's id (see token list)")
	d, u, err := openForUser(ctx, fs, args, env)
	if err != nil {
		return err
	}
	defer d.Close()
	if *id <= 0 {
		return usagef("token revoke: --id is required (see homework token list)")
	}
	if err := d.RevokeAPIToken(ctx, u.ID, *id); err != nil {
		return errors.New(spec.ErrorMessage(err))
	}
	fmt.Fprintf(stdout, "revoked token %d of %s\n", *id, u.Email)
	return nil
}

func migrate(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlagSet("migrate")
	dbPath := dbFlag(fs, env)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	d, err := openShort(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer d.Close()
	name := *dbPath
	name = bind.Redact(name)
	fmt.Fprintf(stdout, "migrated %s\n", name)
	return nil
}
