package keystore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Admin tokens authenticate callers of the admin API. A token is
// "kga_" followed by 36 base62 characters (30 random, a 6-character
// checksum), shaped and checked like an API key, so that a mistyped token
// is refused by ParseAdminToken before any store is asked. Stores keep
// only its SHA-256 Hash, next to the key records (the file keystore's
// admin_tokens section; the Redis hashes <prefix>keystore:{ks}:admin_tokens
// and :admin_token_ids). What the scopes mean is package admintoken's
// business; the store keeps them as given.

// AdminTokenPrefix starts every admin token.
const AdminTokenPrefix = "kga_"

// AdminTokenLen is the length of a whole admin token.
const AdminTokenLen = len(AdminTokenPrefix) + RandomLen + ChecksumLen

// Errors of admin tokens, for errors.Is. They never contain a token.
var (
	// ErrAdminTokenNotFound means no admin token has the id.
	ErrAdminTokenNotFound = errors.New("keystore: no admin token with that id")
	// ErrAdminTokenRevoked means the admin token is already revoked.
	ErrAdminTokenRevoked = errors.New("keystore: admin token is revoked")
)

// AdminToken is what a store knows about one admin token: never the
// token, only its Hash. A plain value, safe to copy.
type AdminToken struct {
	// ID is the public id ("tok_" and 16 hex digits); safe to log and to
	// put in the audit log as an actor.
	ID string `yaml:"id" json:"id"`
	// Name is a human label, such as who or what uses the token.
	Name string `yaml:"name,omitempty" json:"name"`
	// Hash is the SHA-256 of the token; kept out of JSON.
	Hash Hash `yaml:"hash" json:"-"`
	// Scopes are what the token may do, such as keys:read.
	Scopes []string `yaml:"scopes" json:"scopes"`
	// CreatedAt is when the token was created.
	CreatedAt time.Time `yaml:"created_at" json:"created_at"`
	// ExpiresAt is when the token stops working; zero means never.
	ExpiresAt time.Time `yaml:"expires_at,omitempty" json:"expires_at,omitzero"`
	// Status is active or revoked.
	Status Status `yaml:"status" json:"status"`
	// RevokedAt is when the token was revoked; zero unless it was.
	RevokedAt time.Time `yaml:"revoked_at,omitempty" json:"revoked_at,omitzero"`
}

// StateAt is the effective status at now: Active, Revoked or Expired. An
// unknown stored status counts as Revoked.
func (t AdminToken) StateAt(now time.Time) Status {
	if t.Status != Active {
		return Revoked
	}
	if !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) {
		return Expired
	}
	return Active
}

// GenerateAdminToken returns a new random admin token, read from
// crypto/rand.
func GenerateAdminToken() (string, error) {
	return generatePrefixed(AdminTokenPrefix, rand.Reader)
}

// ParseAdminToken checks the prefix, length, alphabet and checksum of an
// admin token. Errors wrap ErrMalformed or ErrChecksum and never contain
// the token; it does no lookup.
func ParseAdminToken(tok string) error {
	if !strings.HasPrefix(tok, AdminTokenPrefix) {
		return fmt.Errorf("%w: an admin token starts with %s", ErrMalformed, AdminTokenPrefix)
	}
	if len(tok) != AdminTokenLen {
		return fmt.Errorf("%w: an admin token is %d characters long", ErrMalformed, AdminTokenLen)
	}
	for i := len(AdminTokenPrefix); i < len(tok); i++ {
		if !isBase62(tok[i]) {
			return errChars
		}
	}
	if !checksumOK(tok) {
		return ErrChecksum
	}
	return nil
}

// NewAdminToken makes a token and its record: active, created at now,
// expiring after expiresIn (zero: never). The token is returned once and
// stored nowhere.
func NewAdminToken(name string, scopes []string, expiresIn time.Duration, now time.Time) (string, AdminToken, error) {
	if expiresIn < 0 {
		return "", AdminToken{}, fmt.Errorf("expires_in: must not be negative, got %s", expiresIn)
	}
	tok, err := GenerateAdminToken()
	if err != nil {
		return "", AdminToken{}, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", AdminToken{}, fmt.Errorf("keystore: new id: %w", err)
	}
	now = now.UTC().Truncate(time.Second)
	t := AdminToken{
		ID: "tok_" + hex.EncodeToString(b[:]), Name: name, Hash: HashKey(tok),
		Scopes: append([]string(nil), scopes...), CreatedAt: now, Status: Active,
	}
	if expiresIn > 0 {
		t.ExpiresAt = now.Add(expiresIn)
	}
	return tok, t, ValidateAdminToken(t)
}

// ValidateAdminToken checks one admin token record.
func ValidateAdminToken(t AdminToken) error {
	switch {
	case !strings.HasPrefix(t.ID, "tok_") || len(t.ID) != 20:
		return fmt.Errorf("admin token %q: id must be tok_ and 16 hex digits", t.ID)
	case t.Hash.IsZero():
		return fmt.Errorf("admin token %s: hash: required", t.ID)
	case len(t.Name) > maxNameLen:
		return fmt.Errorf("admin token %s: name: at most %d bytes", t.ID, maxNameLen)
	case len(t.Scopes) == 0:
		return fmt.Errorf("admin token %s: scopes: at least one is required", t.ID)
	case t.Status != Active && t.Status != Revoked:
		return fmt.Errorf("admin token %s: status: must be active or revoked, got %q", t.ID, t.Status)
	case t.CreatedAt.IsZero():
		return fmt.Errorf("admin token %s: created_at: required", t.ID)
	}
	return nil
}

// validateAdminTokens checks every token and that ids and hashes are
// unique.
func validateAdminTokens(ts []AdminToken) error {
	ids := make(map[string]bool, len(ts))
	hashes := make(map[Hash]bool, len(ts))
	for i, t := range ts {
		if err := ValidateAdminToken(t); err != nil {
			return fmt.Errorf("admin_tokens[%d]: %w", i, err)
		}
		if ids[t.ID] || hashes[t.Hash] {
			return fmt.Errorf("admin_tokens[%d]: duplicate id or hash (%s)", i, t.ID)
		}
		ids[t.ID], hashes[t.Hash] = true, true
	}
	return nil
}
