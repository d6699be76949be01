// Package pgtest gives tests a fresh PostgreSQL database of their own.
//
// The server comes from HOMEWORK_TEST_PG, a postgres:// URL of a role that
// may create databases (.ci/run starts PostgreSQL and sets it). Without it
// the PostgreSQL tests skip with one line, except under CI=true, where they
// fail: CI must run them.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the environment variable holding the server's URL.
const EnvVar = "HOMEWORK_TEST_PG"

// ServerURL returns the test server's URL, or skips t (fails it under CI).
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: CI must run the PostgreSQL tests", EnvVar)
		}
		t.Skipf("PostgreSQL tests skipped: set %s to a postgres:// URL of a role with CREATEDB", EnvVar)
	}
	return u
}

// NewDatabase creates an empty database for t, dropped when t ends, and
// returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "")
}

// NewDatabaseOrderedByLanguage is NewDatabase with a collation that orders
// text by language (ICU's en-US, in which punctuation weighs less than
// letters and case only breaks ties), as a server set up with a language
// locale orders it by default, where code that takes byte order for
// granted goes wrong.
func NewDatabaseOrderedByLanguage(t testing.TB) string {
	t.Helper()
	return newDatabase(t, ` TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'`)
}

func newDatabase(t testing.TB, options string) string {
	t.Helper()
	server := ServerURL(t)
	b := make([]byte, 6)
	rand.Read(b)
	name := "homework_test_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("connect to %s: %v", EnvVar, err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name+options); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Logf("drop test database: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(server)
	if err != nil {
		t.Fatalf("%s: %v", EnvVar, err)
	}
	u.Path = "/" + name
	return u.String()
}
