// Package admintoken authenticates callers of the admin API with admin
// tokens and manages those tokens (`keygate admin-tokens`).
//
// An admin token is "kga_" and 36 base62 characters, checksummed like an
// API key (keystore.ParseAdminToken). It is shown once when created; the
// store (the same file or Redis keystore as the keys) keeps only its
// SHA-256, with an id (tok_…), a name, scopes, created_at, an optional
// expires_at and a status (active or revoked).
//
// For the admin API server:
//
//	store := &keystore.FileAdmin{Path: cfg.Keystore.File} // or &keystore.RedisAdmin{Client: c, Prefix: cfg.Redis.KeyPrefix}
//	authn, err := admintoken.NewAuthenticator(admintoken.AuthConfig{Store: store})
//	info, ok, err := authn.Authenticate(ctx, token) // token: the bearer token, "kga_…"
//	// err != nil: the store failed (5xx); !ok: 401; !info.Has(admintoken.KeysWrite): 403
//
// Authenticate reads the store on every call, so a token created or
// revoked on one machine counts on every replica at once (with Redis, one
// HGET by hash; with the file keystore, a stat of the file, which a
// FileAdmin re-reads only when it changed: keep one FileAdmin). Tokens are
// looked up by their hash and compared in constant time, and an unknown
// well-formed token costs the same lookup as a known one.
//
// Scopes are exact: keys:write does not imply keys:read. consumers:read
// exists beside consumers:write, so that a read-only dashboard token
// needs no write scope. Managing admin tokens has no scope: it is done
// only with `keygate admin-tokens` on a machine that holds the config.
package admintoken

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// The scopes a token may hold.
const (
	KeysRead       = "keys:read"
	KeysWrite      = "keys:write"
	ConsumersRead  = "consumers:read"
	ConsumersWrite = "consumers:write"
	UsageRead      = "usage:read"
	AuditRead      = "audit:read"
)

// Scopes lists every scope, in the order help text shows them.
var Scopes = []string{KeysRead, KeysWrite, ConsumersRead, ConsumersWrite, UsageRead, AuditRead}

// ValidScope reports whether s is one of Scopes.
func ValidScope(s string) bool { return slices.Contains(Scopes, s) }

// ParseScopes parses a comma-separated list of scopes ("keys:read,
// keys:write"); it refuses an unknown scope and an empty list, and drops
// duplicates.
func ParseScopes(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !ValidScope(f) {
			return nil, fmt.Errorf("scopes: unknown scope %q (want some of %s)", f, strings.Join(Scopes, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("scopes: at least one is required (some of %s)", strings.Join(Scopes, ", "))
	}
	return out, nil
}

// Lookup is what the Authenticator needs from a store; keystore.FileAdmin
// and keystore.RedisAdmin fit.
type Lookup interface {
	LookupAdminToken(ctx context.Context, h keystore.Hash) (keystore.AdminToken, bool, error)
}

// Store is what the Service needs from a store; keystore.FileAdmin and
// keystore.RedisAdmin fit.
type Store interface {
	Lookup
	CreateAdminToken(ctx context.Context, t keystore.AdminToken) error
	ListAdminTokens(ctx context.Context) ([]keystore.AdminToken, error)
	RevokeAdminToken(ctx context.Context, id string) (keystore.AdminToken, error)
}

var (
	_ Store = (*keystore.FileAdmin)(nil)
	_ Store = (*keystore.RedisAdmin)(nil)
)

// TokenInfo is who an authenticated admin token is.
type TokenInfo struct {
	// ID is the token's id (tok_…): the actor in the audit log.
	ID     string
	Name   string
	Scopes []string
}

// Has reports whether the token holds scope.
func (i TokenInfo) Has(scope string) bool { return slices.Contains(i.Scopes, scope) }

// AuthConfig configures an Authenticator.
type AuthConfig struct {
	// Store looks tokens up by hash. Required.
	Store Lookup
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Authenticator checks admin tokens. It keeps no state and is safe for
// concurrent use.
type Authenticator struct {
	store Lookup
	now   func() time.Time
}

// NewAuthenticator checks cfg and returns an Authenticator.
func NewAuthenticator(cfg AuthConfig) (*Authenticator, error) {
	if cfg.Store == nil {
		return nil, errors.New("admintoken: a store is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Authenticator{store: cfg.Store, now: cfg.Now}, nil
}

// Authenticate returns who token is. ok is false for a malformed,
// unknown, revoked or expired token (401); err is set when the store
// failed (5xx), never for a bad token. Errors never contain the token.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (TokenInfo, bool, error) {
	if wellFormed := keystore.ParseAdminToken(token) == nil; !wellFormed {
		return TokenInfo{}, false, nil // a bad token is a 401, not an error
	}
	h := keystore.HashKey(token)
	t, found, err := a.store.LookupAdminToken(ctx, h)
	if err != nil {
		return TokenInfo{}, false, fmt.Errorf("admintoken: %w", err)
	}
	if !found || !t.Hash.Equal(h) || t.StateAt(a.now()) != keystore.Active {
		return TokenInfo{}, false, nil
	}
	return TokenInfo{ID: t.ID, Name: t.Name, Scopes: slices.Clone(t.Scopes)}, true, nil
}

// Config configures a Service.
type Config struct {
	// Store keeps the tokens. Required.
	Store Store
	// Auditor receives every change; nil means keyops.NopAuditor.
	Auditor keyops.Auditor
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service creates, lists and revokes admin tokens, and reports every
// change to its Auditor (actions admin_token.create and
// admin_token.revoke; never the token or its hash). It is safe for
// concurrent use.
type Service struct {
	store   Store
	auditor keyops.Auditor
	now     func() time.Time
}

// New checks cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("admintoken: a store is required")
	}
	if cfg.Auditor == nil {
		cfg.Auditor = keyops.NopAuditor{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: cfg.Store, auditor: cfg.Auditor, now: cfg.Now}, nil
}

// CreateRequest asks for a new admin token.
type CreateRequest struct {
	Name string
	// Scopes are some of Scopes; at least one.
	Scopes []string
	// ExpiresIn is the token's lifetime; zero means it never expires.
	ExpiresIn time.Duration
}

// ErrInvalid wraps errors in what was asked for (an unknown scope, a
// negative lifetime); it is keyops.ErrInvalid, so callers map both alike.
var ErrInvalid = keyops.ErrInvalid

type invalidError struct{ err error }

func (e invalidError) Error() string   { return e.err.Error() }
func (e invalidError) Unwrap() []error { return []error{ErrInvalid, e.err} }

// Create makes a token. The token is returned once and stored nowhere.
func (s *Service) Create(ctx context.Context, a keyops.Actor, req CreateRequest) (string, keystore.AdminToken, error) {
	if a.ID == "" {
		return "", keystore.AdminToken{}, invalidError{errors.New("an actor is required for every change")}
	}
	changes := map[string]string{"name": req.Name, "scopes": strings.Join(req.Scopes, ",")}
	if req.ExpiresIn > 0 {
		changes["expires_in"] = req.ExpiresIn.String()
	}
	var err error
	for _, sc := range req.Scopes {
		if !ValidScope(sc) {
			err = invalidError{fmt.Errorf("scopes: unknown scope %q", sc)}
		}
	}
	if len(req.Scopes) == 0 {
		err = invalidError{errors.New("scopes: at least one is required")}
	}
	if terr := keyops.CheckName("name", req.Name); terr != nil && err == nil {
		err = terr // wraps keyops.ErrInvalid
	}
	var tok string
	var t keystore.AdminToken
	if err == nil {
		tok, t, err = keystore.NewAdminToken(req.Name, req.Scopes, req.ExpiresIn, s.now())
		if err != nil {
			err = invalidError{err}
		} else {
			err = s.store.CreateAdminToken(ctx, t)
		}
	}
	if err := s.audit(ctx, a, "admin_token.create", t.ID, changes, err); err != nil {
		return "", keystore.AdminToken{}, err
	}
	return tok, t, nil
}

// List returns every token (never the token or its hash), oldest first.
func (s *Service) List(ctx context.Context) ([]keystore.AdminToken, error) {
	return s.store.ListAdminTokens(ctx)
}

// Revoke revokes the token with id at once.
func (s *Service) Revoke(ctx context.Context, a keyops.Actor, id string) (keystore.AdminToken, error) {
	if a.ID == "" {
		return keystore.AdminToken{}, invalidError{errors.New("an actor is required for every change")}
	}
	t, err := s.store.RevokeAdminToken(ctx, id)
	if err := s.audit(ctx, a, "admin_token.revoke", id, map[string]string{"status": string(keystore.Revoked)}, err); err != nil {
		return keystore.AdminToken{}, err
	}
	return t, nil
}

func (s *Service) audit(ctx context.Context, a keyops.Actor, action, target string, changes map[string]string, err error) error {
	aerr := s.auditor.Audit(ctx, keyops.Event{Time: s.now().UTC(), Actor: a, Action: action, Target: target, Changes: changes, Err: err})
	if err != nil {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("admintoken: %s %s was made but not audited: %w", action, target, aerr)
	}
	return nil
}
