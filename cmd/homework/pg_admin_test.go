package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"homework/db/pg/pgtest"
)

// TestAdminCommandsOnPostgres runs every short-lived command against a
// PostgreSQL database named by HOMEWORK_DB (a postgres:// URL), with no
// password in what they print.
func TestAdminCommandsOnPostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	env := func(k string) string {
		if k == "HOMEWORK_DB" {
			return url
		}
		return ""
	}
	ctx := context.Background()
	do := func(stdin string, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, args, env, strings.NewReader(stdin), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	for range 2 {
		if out := do("", "migrate"); !strings.HasPrefix(out, "migrated postgres") || strings.Contains(out, "homework:homework@") {
			t.Errorf("migrate printed %q", out)
		}
	}
	if out := do("correct horse battery\n", "user", "add", "--email", "ann@example.com", "--admin"); !strings.Contains(out, "created admin ann@example.com") {
		t.Errorf("user add printed %q", out)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"user", "add", "--email", "ANN@example.com"}, env, strings.NewReader("correct horse battery\n"), &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "already exists") {
		t.Errorf("a second account with the same email in another case: exit %d, %q", code, errb.String())
	}
	token := strings.TrimSpace(do("", "token", "create", "--email", "ann@example.com", "--name", "ci"))
	if !strings.HasPrefix(token, "hw_") {
		t.Fatalf("token %q", token)
	}
	list := do("", "token", "list", "--email", "ann@example.com")
	if !strings.Contains(list, `"ci"`) || !strings.Contains(list, "active") {
		t.Errorf("token list = %q", list)
	}
	id := strings.Fields(list)[0]
	if out := do("", "token", "revoke", "--email", "ann@example.com", "--id", id); !strings.Contains(out, "revoked token "+id) {
		t.Errorf("token revoke printed %q", out)
	}
	if list := do("", "token", "list", "--email", "ann@example.com"); !strings.Contains(list, "revoked") {
		t.Errorf("token list after revoke = %q", list)
	}
}
