package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"homework/engine/spec"
	"strings"
	"time"
)

func scanUser(s Row) (*spec.User, error) {
	var u spec.User
	var created int64
	if err := s.Scan(&u.ID, &u.Email, &u.PasswordHash, &u.IsAdmin, &created); err != nil {
		return nil, err
	}
	u.CreatedAt = msTime(created)
	return &u, nil
}

const userCols = `id, email, password_hash, is_admin, created_at`

// CreateUser stores a new account. A taken email is ECONFLICT.
func (s Store) CreateUser(ctx context.Context, email, passwordHash string, admin bool) (*spec.User, error) {
	email = strings.TrimSpace(email)
	u := &spec.User{Email: email, PasswordHash: passwordHash, IsAdmin: admin}
	err := s.write(ctx, func(tx *Tx) error {
		u.CreatedAt = tx.now
		return tx.c.QueryRow(ctx, `INSERT INTO users (email, password_hash, is_admin, created_at) VALUES (?,?,?,?) RETURNING id`,
			email, passwordHash, admin, tx.now.UnixMilli()).Scan(&u.ID)
	})
	if s.d.IsUniqueViolation(err) {
		return nil, &spec.Error{Code: spec.ECONFLICT, Field: "email", Message: "A user with this email already exists."}
	}
	return u, err
}

// CreateFirstUser creates an admin account only when there is no account
// yet; otherwise it returns ECONFLICT. It is what /setup uses.
func (s Store) CreateFirstUser(ctx context.Context, email, passwordHash string) (*spec.User, error) {
	u := &spec.User{Email: strings.TrimSpace(email), PasswordHash: passwordHash, IsAdmin: true}
	err := s.write(ctx, func(tx *Tx) error {
		if tx.d.LockUsers != "" {
			if _, err := tx.c.Exec(ctx, tx.d.LockUsers); err != nil {
				return err
			}
		}
		var n int
		if err := tx.c.QueryRow(ctx, `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return spec.Errorf(spec.ECONFLICT, "Setup is already done.")
		}
		u.CreatedAt = tx.now
		return tx.c.QueryRow(ctx, `INSERT INTO users (email, password_hash, is_admin, created_at) VALUES (?,?,?,?) RETURNING id`,
			u.Email, passwordHash, true, tx.now.UnixMilli()).Scan(&u.ID)
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// CountUsers returns the number of accounts.
func (r Reads) CountUsers(ctx context.Context) (int, error) {
	var n int
	err := r.c.QueryRow(ctx, `SELECT COUNT(*) FROM users`).Scan(&n)
	return n, err
}

// FindUserByEmail returns the account with email (case-insensitive).
func (r Reads) FindUserByEmail(ctx context.Context, email string) (*spec.User, error) {
	u, err := scanUser(r.c.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE lower(email) = lower(?)`, strings.TrimSpace(email)))
	return u, notFound(err, "User")
}

// FindUserByID returns the account with id.
func (r Reads) FindUserByID(ctx context.Context, id int64) (*spec.User, error) {
	u, err := scanUser(r.c.QueryRow(ctx, `SELECT `+userCols+` FROM users WHERE id = ?`, id))
	return u, notFound(err, "User")
}

// CreateAPIToken creates a token for the user and returns its secret, which
// is shown once and stored only as a hash.
func (s Store) CreateAPIToken(ctx context.Context, userID int64, name string) (string, *spec.APIToken, error) {
	secret := spec.NewSecret("hw_")
	t := &spec.APIToken{UserID: userID, Name: name}
	err := s.write(ctx, func(tx *Tx) error {
		t.CreatedAt = tx.now
		return tx.c.QueryRow(ctx, `INSERT INTO api_tokens (user_id, name, token_hash, created_at) VALUES (?,?,?,?) RETURNING id`,
			userID, name, spec.HashToken(secret), tx.now.UnixMilli()).Scan(&t.ID)
	})
	if s.d.IsForeignKeyViolation(err) {
		return "", nil, spec.Errorf(spec.ENOTFOUND, "User not found.")
	} else if err != nil {
		return "", nil, err
	}
	return secret, t, nil
}

// ListAPITokens returns the user's tokens (never their secrets), newest first.
func (r Reads) ListAPITokens(ctx context.Context, userID int64) ([]*spec.APIToken, error) {
	rows, err := r.c.Query(ctx, `SELECT id, user_id, name, created_at, last_used_at, revoked_at
		FROM api_tokens WHERE user_id = ? ORDER BY id DESC`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.APIToken
	for rows.Next() {
		var t spec.APIToken
		var created int64
		var used, revoked sql.NullInt64
		if err := rows.Scan(&t.ID, &t.UserID, &t.Name, &created, &used, &revoked); err != nil {
			return nil, err
		}
		t.CreatedAt, t.LastUsedAt, t.RevokedAt = msTime(created), fromMS(used), fromMS(revoked)
		out = append(out, &t)
	}
	return out, rows.Err()
}

// RevokeAPIToken revokes one of the user's tokens.
func (s Store) RevokeAPIToken(ctx context.Context, userID, tokenID int64) error {
	return s.write(ctx, func(tx *Tx) error {
		n, err := tx.c.Exec(ctx, `UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL`,
			tx.now.UnixMilli(), tokenID, userID)
		if err != nil {
			return err
		}
		if n == 0 {
			return spec.Errorf(spec.ENOTFOUND, "Token not found.")
		}
		return nil
	})
}

// FindUserByToken returns the owner of an unrevoked API token secret, or
// EUNAUTHORIZED. last_used_at is refreshed at most once a minute.
func (s Store) FindUserByToken(ctx context.Context, secret string) (*spec.User, error) {
	var tokenID int64
	var lastUsed sql.NullInt64
	row := s.c.QueryRow(ctx, `SELECT u.id, u.email, u.password_hash, u.is_admin, u.created_at, t.id, t.last_used_at
		FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ? AND t.revoked_at IS NULL`, spec.HashToken(secret))
	var u spec.User
	var created int64
	if err := row.Scan(&u.ID, &u.Email, &u.PasswordHash, &u.IsAdmin, &created, &tokenID, &lastUsed); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, spec.Errorf(spec.EUNAUTHORIZED, "Invalid or revoked API token.")
		}
		return nil, err
	}
	u.CreatedAt = msTime(created)
	now := s.now()
	if !lastUsed.Valid || now.Sub(time.UnixMilli(lastUsed.Int64)) > time.Minute {
		s.write(ctx, func(tx *Tx) error {
			_, err := tx.c.Exec(ctx, `UPDATE api_tokens SET last_used_at = ? WHERE id = ?`, now.UnixMilli(), tokenID)
			return err
		})
	}
	return &u, nil
}

// CreateSession creates a browser session and returns its secret.
func (s Store) CreateSession(ctx context.Context, userID int64, ttl time.Duration) (string, *spec.Session, error) {
	secret := spec.NewSecret("")
	sess := &spec.Session{UserID: userID, CSRFToken: spec.NewSecret("")}
	err := s.write(ctx, func(tx *Tx) error {
		sess.ExpiresAt = tx.now.Add(ttl)
		if _, err := tx.c.Exec(ctx, `DELETE FROM sessions WHERE expires_at < ?`, tx.now.UnixMilli()); err != nil {
			return err
		}
		_, err := tx.c.Exec(ctx, `INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at) VALUES (?,?,?,?,?)`,
			spec.HashToken(secret), userID, sess.CSRFToken, tx.now.UnixMilli(), sess.ExpiresAt.UnixMilli())
		return err
	})
	if err != nil {
		return "", nil, err
	}
	return secret, sess, nil
}

// FindSession returns the unexpired session with secret and its user, or
// EUNAUTHORIZED.
func (st Store) FindSession(ctx context.Context, secret string) (*spec.Session, *spec.User, error) {
	var s spec.Session
	var u spec.User
	var created, expires int64
	err := st.c.QueryRow(ctx, `SELECT s.user_id, s.csrf_token, s.expires_at, u.id, u.email, u.password_hash, u.is_admin, u.created_at
		FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = ? AND s.expires_at > ?`,
		spec.HashToken(secret), st.now().UnixMilli()).Scan(&s.UserID, &s.CSRFToken, &expires, &u.ID, &u.Email, &u.PasswordHash, &u.IsAdmin, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, spec.Errorf(spec.EUNAUTHORIZED, "Not signed in.")
	} else if err != nil {
		return nil, nil, err
	}
	s.ExpiresAt = msTime(expires)
	u.CreatedAt = msTime(created)
	return &s, &u, nil
}

// DeleteSession signs a session out.
func (s Store) DeleteSession(ctx context.Context, secret string) error {
	return s.write(ctx, func(tx *Tx) error {
		_, err := tx.c.Exec(ctx, `DELETE FROM sessions WHERE token_hash = ?`, spec.HashToken(secret))
		return err
	})
}

// LiveCredentials reports which of the given credentials still
// authenticate, in one query: API tokens by the hash of their secret
// (present and unrevoked) and sessions by the hash of theirs (present and
// unexpired). A hash missing from the result is revoked, expired or gone.
func (s Store) LiveCredentials(ctx context.Context, tokenHashes, sessionHashes []string) (tokens, sessions map[string]bool, err error) {
	tokens, sessions = map[string]bool{}, map[string]bool{}
	if len(tokenHashes) == 0 && len(sessionHashes) == 0 {
		return tokens, sessions, nil
	}
	in := func(hashes []string) (string, []any) {
		if len(hashes) == 0 {
			return "(NULL)", nil
		}
		args := make([]any, len(hashes))
		for i, h := range hashes {
			args[i] = h
		}
		return "(" + placeholders(len(hashes)) + ")", args
	}
	tin, args := in(tokenHashes)
	sin, sargs := in(sessionHashes)
	args = append(append(args, sargs...), s.now().UnixMilli())
	rows, err := s.c.Query(ctx, `SELECT 0, token_hash FROM api_tokens WHERE token_hash IN `+tin+` AND revoked_at IS NULL
		UNION ALL
		SELECT 1, token_hash FROM sessions WHERE token_hash IN `+sin+` AND expires_at > ?`, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind int
		var hash string
		if err := rows.Scan(&kind, &hash); err != nil {
			return nil, nil, err
		}
		if kind == 1 {
			sessions[hash] = true
		} else {
			tokens[hash] = true
		}
	}
	return tokens, sessions, rows.Err()
}

// ListUsers returns every account, oldest first.
func (r Reads) ListUsers(ctx context.Context) ([]*spec.User, error) {
	rows, err := r.c.Query(ctx, `SELECT `+userCols+` FROM users ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*spec.User
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// SetPassword replaces the password hash of the account with email and
// signs out its browser sessions, so a leaked password stops working
// everywhere at once. An unknown email is ENOTFOUND.
func (s Store) SetPassword(ctx context.Context, email, passwordHash string) (*spec.User, error) {
	var u *spec.User
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		u, err = scanUser(tx.c.QueryRow(ctx, `UPDATE users SET password_hash = ? WHERE lower(email) = lower(?) RETURNING `+userCols,
			passwordHash, strings.TrimSpace(email)))
		if err != nil {
			return notFound(err, "User")
		}
		_, err = tx.c.Exec(ctx, `DELETE FROM sessions WHERE user_id = ?`, u.ID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}
