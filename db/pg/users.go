package pg

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"homework/db"
	"homework/engine/spec"
)

const userCols = `id, email, password_hash, is_admin, created_at`

func scanUser(s pgx.Row) (*spec.User, error) {
	var u spec.User
	var created int64
	if err := s.Scan(&u.ID, &u.Email, &u.PasswordHash, &u.IsAdmin, &created); err != nil {
		return nil, err
	}
	u.CreatedAt = time.UnixMilli(created).UTC()
	return &u, nil
}

// CreateUser stores a new account. A taken email (in any case) is ECONFLICT.
func (d *DB) CreateUser(ctx context.Context, email, passwordHash string, admin bool) (*spec.User, error) {
	email = strings.TrimSpace(email)
	u := &spec.User{Email: email, PasswordHash: passwordHash, IsAdmin: admin}
	err := d.WriteTx(ctx, func(tx *Tx) error {
		u.CreatedAt = tx.now
		return tx.QueryRow(ctx, `INSERT INTO users (email, password_hash, is_admin, created_at) VALUES ($1,$2,$3,$4) RETURNING id`,
			email, passwordHash, admin, tx.now.UnixMilli()).Scan(&u.ID)
	})
	if pgCode(err) == uniqueViolation {
		return nil, &spec.Error{Code: spec.ECONFLICT, Field: "email", Message: "A user with this email already exists."}
	}
	if err != nil {
		return nil, err
	}
	return u, nil
}

// CreateFirstUser creates an admin account only when there is no account
// yet; otherwise it returns ECONFLICT. A table lock makes two concurrent
// setups, in any processes, create one account.
func (d *DB) CreateFirstUser(ctx context.Context, email, passwordHash string) (*spec.User, error) {
	u := &spec.User{Email: strings.TrimSpace(email), PasswordHash: passwordHash, IsAdmin: true}
	err := d.WriteTx(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return spec.Errorf(spec.ECONFLICT, "Setup is already done.")
		}
		u.CreatedAt = tx.now
		return tx.QueryRow(ctx, `INSERT INTO users (email, password_hash, is_admin, created_at) VALUES ($1,$2,true,$3) RETURNING id`,
			u.Email, passwordHash, tx.now.UnixMilli()).Scan(&u.ID)
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// CountUsers returns the number of accounts.
func (d *DB) CountUsers(ctx context.Context) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, `SELECT COUNT(*) FROM users`).Scan(&n)
	return n, err
}

// FindUserByEmail returns the account with email (case-insensitive).
func (d *DB) FindUserByEmail(ctx context.Context, email string) (*spec.User, error) {
	u, err := scanUser(d.pool.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE lower(email) = lower($1)`, strings.TrimSpace(email)))
	return u, notFound(err, "User")
}

// FindUserByID returns the account with id.
func (d *DB) FindUserByID(ctx context.Context, id int64) (*spec.User, error) {
	u, err := scanUser(d.pool.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = $1`, id))
	return u, notFound(err, "User")
}

// CreateAPIToken creates a token for the user and returns its secret, which
// is shown once and stored only as a hash.
func (d *DB) CreateAPIToken(ctx context.Context, userID int64, name string) (string, *spec.APIToken, error) {
	secret := db.NewSecret("hw_")
	t := &spec.APIToken{UserID: userID, Name: name}
	err := d.WriteTx(ctx, func(tx *Tx) error {
		t.CreatedAt = tx.now
		return tx.QueryRow(ctx, `INSERT INTO api_tokens (user_id, name, token_hash, created_at) VALUES ($1,$2,$3,$4) RETURNING id`,
			userID, name, db.HashToken(secret), tx.now.UnixMilli()).Scan(&t.ID)
	})
	if pgCode(err) == foreignKeyViolation {
		return "", nil, spec.Errorf(spec.ENOTFOUND, "User not found.")
	}
	if err != nil {
		return "", nil, err
	}
	return secret, t, nil
}

// ListAPITokens returns the user's tokens (never their secrets), newest first.
func (d reads) ListAPITokens(ctx context.Context, userID int64) ([]*spec.APIToken, error) {
	rows, err := d.q.Query(ctx, `SELECT id, user_id, name, created_at, last_used_at, revoked_at
		FROM api_tokens WHERE user_id = $1 ORDER BY id DESC`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.APIToken
	for rows.Next() {
		var t spec.APIToken
		var created int64
		var used, revoked *int64
		if err := rows.Scan(&t.ID, &t.UserID, &t.Name, &created, &used, &revoked); err != nil {
			return nil, err
		}
		t.CreatedAt, t.LastUsedAt, t.RevokedAt = time.UnixMilli(created).UTC(), fromMS(used), fromMS(revoked)
		out = append(out, &t)
	}
	return out, rows.Err()
}

// RevokeAPIToken revokes one of the user's tokens.
func (d *DB) RevokeAPIToken(ctx context.Context, userID, tokenID int64) error {
	tag, err := d.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL`,
		d.now().UnixMilli(), tokenID, userID)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return spec.Errorf(spec.ENOTFOUND, "Token not found.")
	}
	return nil
}

// FindUserByToken returns the owner of an unrevoked API token secret, or
// EUNAUTHORIZED. last_used_at is refreshed at most once a minute.
func (d *DB) FindUserByToken(ctx context.Context, secret string) (*spec.User, error) {
	var tokenID int64
	var lastUsed *int64
	var u spec.User
	var created int64
	err := d.pool.QueryRow(ctx, `SELECT u.id, u.email, u.password_hash, u.is_admin, u.created_at, t.id, t.last_used_at
		FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = $1 AND t.revoked_at IS NULL`,
		db.HashToken(secret)).Scan(&u.ID, &u.Email, &u.PasswordHash, &u.IsAdmin, &created, &tokenID, &lastUsed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, spec.Errorf(spec.EUNAUTHORIZED, "Invalid or revoked API token.")
	} else if err != nil {
		return nil, err
	}
	u.CreatedAt = time.UnixMilli(created).UTC()
	now := d.now()
	if lastUsed == nil || now.Sub(time.UnixMilli(*lastUsed)) > time.Minute {
		d.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = $1 WHERE id = $2`, now.UnixMilli(), tokenID)
	}
	return &u, nil
}

// CreateSession creates a browser session and returns its secret.
func (d *DB) CreateSession(ctx context.Context, userID int64, ttl time.Duration) (string, *spec.Session, error) {
	secret := db.NewSecret("")
	s := &spec.Session{UserID: userID, CSRFToken: db.NewSecret("")}
	err := d.WriteTx(ctx, func(tx *Tx) error {
		s.ExpiresAt = tx.now.Add(ttl)
		if _, err := tx.Exec(ctx, `DELETE FROM sessions WHERE expires_at < $1`, tx.now.UnixMilli()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at) VALUES ($1,$2,$3,$4,$5)`,
			db.HashToken(secret), userID, s.CSRFToken, tx.now.UnixMilli(), s.ExpiresAt.UnixMilli())
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return secret, s, nil
}

// FindSession returns the unexpired session with secret and its user, or
// EUNAUTHORIZED.
func (d *DB) FindSession(ctx context.Context, secret string) (*spec.Session, *spec.User, error) {
	var s spec.Session
	var u spec.User
	var created, expires int64
	err := d.pool.QueryRow(ctx, `SELECT s.user_id, s.csrf_token, s.expires_at, u.id, u.email, u.password_hash, u.is_admin, u.created_at
		FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = $1 AND s.expires_at > $2`,
		db.HashToken(secret), d.now().UnixMilli()).Scan(&s.UserID, &s.CSRFToken, &expires, &u.ID, &u.Email, &u.PasswordHash, &u.IsAdmin, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, spec.Errorf(spec.EUNAUTHORIZED, "Not signed in.")
	} else if err != nil {
		return nil, nil, err
	}
	s.ExpiresAt = time.UnixMilli(expires).UTC()
	u.CreatedAt = time.UnixMilli(created).UTC()
	return &s, &u, nil
}

// LiveCredentials reports which of the given credentials still
// authenticate, in one query: API tokens by the hash of their secret
// (present and unrevoked) and sessions by the hash of theirs (present and
// unexpired). A hash missing from the result is revoked, expired or gone.
func (d *DB) LiveCredentials(ctx context.Context, tokenHashes, sessionHashes []string) (tokens, sessions map[string]bool, err error) {
	tokens, sessions = map[string]bool{}, map[string]bool{}
	if len(tokenHashes) == 0 && len(sessionHashes) == 0 {
		return tokens, sessions, nil
	}
	if tokenHashes == nil {
		tokenHashes = []string{}
	}
	if sessionHashes == nil {
		sessionHashes = []string{}
	}
	rows, err := d.pool.Query(ctx, `SELECT false, token_hash FROM api_tokens WHERE token_hash = ANY($1) AND revoked_at IS NULL
		UNION ALL
		SELECT true, token_hash FROM sessions WHERE token_hash = ANY($2) AND expires_at > $3`,
		tokenHashes, sessionHashes, d.now().UnixMilli())
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var session bool
		var hash string
		if err := rows.Scan(&session, &hash); err != nil {
			return nil, nil, err
		}
		if session {
			sessions[hash] = true
		} else {
			tokens[hash] = true
		}
	}
	return tokens, sessions, rows.Err()
}

// DeleteSession signs a session out.
func (d *DB) DeleteSession(ctx context.Context, secret string) error {
	_, err := d.pool.Exec(ctx, `DELETE FROM sessions WHERE token_hash = $1`, db.HashToken(secret))
	return err
}
