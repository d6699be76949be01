package sqlstore

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"
)

// Migrate applies the migrations in dir of fsys (NNNN_name.sql), in order,
// each in a transaction of its own and recorded in schema_migrations, which
// it creates when missing (createTable is that table's DDL, in the
// database's dialect). begin starts a transaction on the database; commit
// and rollback end it.
func Migrate(ctx context.Context, fsys fs.FS, dir, createTable string, now func() time.Time,
	exec func(ctx context.Context, query string) error,
	begin func(ctx context.Context) (tx Conn, commit func() error, rollback func(), err error)) error {
	if err := exec(ctx, createTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		base := path.Base(name)
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: bad version prefix", base)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		if err := applyMigration(ctx, version, base, string(body), now, begin); err != nil {
			return err
		}
	}
	return nil
}

func applyMigration(ctx context.Context, version int, base, body string, now func() time.Time,
	begin func(ctx context.Context) (Conn, func() error, func(), error)) error {
	tx, commit, rollback, err := begin(ctx)
	if err != nil {
		return err
	}
	defer rollback()
	var n int
	if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	// The body may hold several statements: run it as it is, with no
	// arguments (and so no placeholders to number).
	if _, err := tx.Exec(ctx, body); err != nil {
		return fmt.Errorf("migration %s: %w", base, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		version, base, now().UnixMilli()); err != nil {
		return err
	}
	return commit()
}

// MigrateRiver applies River's own migrations through driver.
func MigrateRiver[TTx any](ctx context.Context, driver riverdriver.Driver[TTx]) error {
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}
