package auth

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/keygate/keygate/keystore"
)

// KeyLookup finds a key record by the hash of the key. ok=false means no
// such key; an error means the store could not answer.
type KeyLookup interface {
	Lookup(ctx context.Context, h keystore.Hash) (rec keystore.Record, ok bool, err error)
}

// APIKeysConfig configures an APIKeys authenticator.
type APIKeysConfig struct {
	// Store finds records by key hash. Required.
	Store KeyLookup
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// APIKeys authenticates the x-api-key header against a key store. Keys are
// looked up by their SHA-256 and compared in constant time; an unknown key
// costs the same work as a known one. It is safe for concurrent use.
type APIKeys struct {
	store KeyLookup
	now   func() time.Time
}

// NewAPIKeys returns an authenticator over cfg.Store.
func NewAPIKeys(cfg APIKeysConfig) (*APIKeys, error) {
	if cfg.Store == nil {
		return nil, errors.New("auth: a key store is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &APIKeys{store: cfg.Store, now: cfg.Now}, nil
}

// headerAPIKey is x-api-key in canonical form; Go's server canonicalizes
// incoming header names, so any letter case lands here.
const headerAPIKey = "X-Api-Key"

// Present reports whether the request carries an x-api-key header.
func (a *APIKeys) Present(r *http.Request) bool { return len(r.Header[headerAPIKey]) > 0 }

// Messages for refusals. They never echo the key.
const (
	msgMissing   = "Unauthorized: API key missing; send it in the x-api-key header"
	msgInvalid   = "Unauthorized: API key invalid"
	msgDuplicate = "Unauthorized: more than one API key sent"
	msgRevoked   = "API Key Expired: API key revoked; obtain a new key"
	msgExpired   = "API Key Expired: API key expired; obtain a new key"
)

var (
	productsExtraction = []string{string(keystore.Extraction)}
	productsRegistry   = []string{string(keystore.Registry)}
)

// dummy is compared against on a miss so a miss costs what a hit does.
var dummy keystore.Hash

// Authenticate checks the x-api-key header. It reads no body.
func (a *APIKeys) Authenticate(r *http.Request) (Verdict, error) {
	vals := r.Header[headerAPIKey]
	if len(vals) == 0 || (len(vals) == 1 && vals[0] == "") {
		return Refuse(ReasonMissing, msgMissing), nil
	}
	key := vals[0]
	for _, v := range vals[1:] {
		if v != key {
			return Refuse(ReasonDuplicate, msgDuplicate), nil
		}
	}
	env, err := keystore.Parse(key)
	if err != nil {
		if errors.Is(err, keystore.ErrChecksum) {
			return Refuse(ReasonChecksum, msgInvalid), nil
		}
		return Refuse(ReasonMalformed, msgInvalid), nil
	}
	h := keystore.HashKey(key)
	rec, ok, err := a.store.Lookup(r.Context(), h)
	if err != nil {
		return Verdict{}, err
	}
	if !ok {
		_ = h.Equal(dummy)
		return Refuse(ReasonUnknown, msgInvalid), nil
	}
	if !rec.Hash.Equal(h) || rec.Env != env {
		return Refuse(ReasonUnknown, msgInvalid), nil
	}
	switch rec.StateAt(a.now()) {
	case keystore.Active:
	case keystore.Revoked:
		return Refuse(ReasonRevoked, msgRevoked), nil
	default:
		return Refuse(ReasonExpired, msgExpired), nil
	}
	p := Principal{ID: rec.ID, Name: rec.Name, Env: string(rec.Env), Context: rec.Context, Method: MethodAPIKey, Limits: rec.Limits}
	if rec.Limits != nil {
		p.Access = rec.Limits.Access
	}
	if rec.Leak != nil && rec.Leak.Action == "quarantine" {
		p.LeakedUntil = rec.ExpiresAt
	}
	switch rec.Product {
	case keystore.Extraction:
		p.Products = productsExtraction
	case keystore.Registry:
		p.Products = productsRegistry
	}
	return Verdict{OK: true, Principal: p}, nil
}
