package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keygate/keygate/filewatch"

	"github.com/redis/go-redis/v9"
)

// CreateAdminToken stores a new admin token record; its id and hash must
// be unused.
func (a *FileAdmin) CreateAdminToken(ctx context.Context, t AdminToken) error {
	if err := ValidateAdminToken(t); err != nil {
		return err
	}
	return a.updateDoc(ctx, func(doc *fileDoc) error {
		doc.AdminTokens = append(doc.AdminTokens, t)
		return nil // updateDoc refuses a duplicate id or hash
	})
}

// ListAdminTokens returns every admin token in the order they were
// created.
func (a *FileAdmin) ListAdminTokens(ctx context.Context) ([]AdminToken, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	doc, err := readDoc(a.Path)
	return doc.AdminTokens, err
}

// RevokeAdminToken revokes the admin token with id at once.
func (a *FileAdmin) RevokeAdminToken(ctx context.Context, id string) (AdminToken, error) {
	var out AdminToken
	err := a.updateDoc(ctx, func(doc *fileDoc) error {
		for i, t := range doc.AdminTokens {
			if t.ID == id {
				r, err := revokeAdminToken(t, a.now())
				doc.AdminTokens[i], out = r, r
				return err
			}
		}
		return fmt.Errorf("%q: %w", id, ErrAdminTokenNotFound)
	})
	return out, err
}

// LookupAdminToken returns the admin token whose token hashes to h. It
// stats the file at every call and re-reads it when it changed (every
// write replaces it, so a change is seen at once), and compares h with
// every token's hash in constant time, so an unknown token costs what a
// known one does.
func (a *FileAdmin) LookupAdminToken(ctx context.Context, h Hash) (AdminToken, bool, error) {
	ts, err := a.tokens.load(ctx, a.Path)
	if err != nil {
		return AdminToken{}, false, err
	}
	var out AdminToken
	found := false
	for _, t := range ts {
		if t.Hash.Equal(h) && !found {
			out, found = t, true
		}
	}
	return out, found, nil
}

// adminTokenCache holds the admin tokens of a keystore file as of its
// last read, so that authenticating does not parse every key record
// each time. The zero value is empty.
type adminTokenCache struct {
	mu     sync.Mutex
	sig    filewatch.Stat
	tokens []AdminToken
	loaded bool
}

func (c *adminTokenCache) load(ctx context.Context, path string) ([]AdminToken, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sig := filewatch.StatOf(path)
	if c.loaded && sig.Same(c.sig) {
		return c.tokens, nil
	}
	doc, err := readDoc(path)
	if err != nil {
		return nil, err
	}
	c.sig, c.tokens, c.loaded = sig, doc.AdminTokens, true
	return c.tokens, nil
}

func revokeAdminToken(t AdminToken, now time.Time) (AdminToken, error) {
	if t.Status == Revoked {
		return t, fmt.Errorf("%s: %w", t.ID, ErrAdminTokenRevoked)
	}
	t.Status, t.RevokedAt = Revoked, now.UTC().Truncate(time.Second)
	return t, nil
}

// Redis layout of admin tokens, in the keystore's hash slot:
//
//	<prefix>keystore:{ks}:admin_tokens     field "sha256:<hex>" -> token JSON
//	<prefix>keystore:{ks}:admin_token_ids  field "<token id>"   -> "sha256:<hex>"
//
// Replicas read them from Redis at each authentication (no copy to keep
// current), so a new or revoked token counts on every replica at once.
// Their names are made once per RedisAdmin (redisKeys), not per call:
// making them per authentication cost 75 µs of CPU per admin API call.
func (a *RedisAdmin) adminTokenKeys() (tokens, ids string) {
	k := a.keys()
	return k.adminTokens, k.adminTokenIDs
}

type storedAdminToken struct {
	AdminToken
	Hash Hash `json:"hash"`
}

func decodeAdminToken(field, v string) (AdminToken, error) {
	var s storedAdminToken
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return AdminToken{}, fmt.Errorf("keystore: admin token %s: %w", field, err)
	}
	t := s.AdminToken
	t.Hash = s.Hash
	if h, err := ParseHash(field); err != nil || h != t.Hash {
		return AdminToken{}, fmt.Errorf("keystore: admin token under %q does not match its hash", field)
	}
	return t, ValidateAdminToken(t)
}

func encodeAdminToken(t AdminToken) (string, error) {
	b, err := json.Marshal(storedAdminToken{AdminToken: t, Hash: t.Hash})
	return string(b), err
}

// CreateAdminToken stores a new admin token record; its id and hash must
// be unused.
func (a *RedisAdmin) CreateAdminToken(ctx context.Context, t AdminToken) error {
	if err := ValidateAdminToken(t); err != nil {
		return err
	}
	v, err := encodeAdminToken(t)
	if err != nil {
		return err
	}
	tokens, ids := a.adminTokenKeys()
	err = a.watchTokens(ctx, func(tx *redis.Tx) error {
		idUsed, err := tx.HExists(ctx, ids, t.ID).Result()
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		hashUsed, err := tx.HExists(ctx, tokens, t.Hash.String()).Result()
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		if idUsed || hashUsed {
			return fmt.Errorf("keystore: admin token id %s or its hash already in use", t.ID)
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, tokens, t.Hash.String(), v)
			p.HSet(ctx, ids, t.ID, t.Hash.String())
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	if err := a.ack(ctx, "admin_token", tokens); err != nil {
		// Its caller does not get the token: revoke it again.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*a.waitTimeout())
		defer cancel()
		if _, rerr := a.RevokeAdminToken(rctx, t.ID); rerr != nil && !errors.Is(rerr, ErrNotDurable) {
			return fmt.Errorf("keystore: admin token %s was stored but not confirmed, and revoking it failed too (revoke it): %w", t.ID, errors.Join(err, rerr))
		}
		return fmt.Errorf("keystore: admin token %s was stored but not confirmed; it is revoked: %w", t.ID, err)
	}
	return nil
}

func (a *RedisAdmin) watchTokens(ctx context.Context, f func(tx *redis.Tx) error) error {
	tokens, ids := a.adminTokenKeys()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		err = a.Client.Watch(ctx, f, tokens, ids)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return err
}

// ListAdminTokens returns every admin token, oldest first.
func (a *RedisAdmin) ListAdminTokens(ctx context.Context) ([]AdminToken, error) {
	tokens, _ := a.adminTokenKeys()
	out, err := hashAll(ctx, a.Client, tokens, a.scanCount(), decodeAdminToken)
	if err != nil {
		return nil, err
	}
	oldestFirst(out, func(t *AdminToken) time.Time { return t.CreatedAt }, func(t *AdminToken) string { return t.ID })
	return out, nil
}

// RevokeAdminToken revokes the admin token with id at once, on every
// replica.
func (a *RedisAdmin) RevokeAdminToken(ctx context.Context, id string) (AdminToken, error) {
	tokens, ids := a.adminTokenKeys()
	var out AdminToken
	err := a.watchTokens(ctx, func(tx *redis.Tx) error {
		hs, err := tx.HGet(ctx, ids, id).Result()
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("%q: %w", id, ErrAdminTokenNotFound)
		}
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		v, err := tx.HGet(ctx, tokens, hs).Result()
		if err != nil {
			return fmt.Errorf("keystore: admin token %s: %w", id, err)
		}
		t, err := decodeAdminToken(hs, v)
		if err != nil {
			return err
		}
		if out, err = revokeAdminToken(t, a.now()); err != nil {
			return err
		}
		nv, err := encodeAdminToken(out)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, tokens, hs, nv)
			return nil
		})
		return err
	})
	if err != nil {
		return AdminToken{}, err
	}
	return out, a.ack(ctx, "admin_token", tokens)
}

// LookupAdminToken returns the admin token whose token hashes to h: one
// HGET by hash, the same for a known and an unknown token. The record is
// read at every call, so a revocation counts at once; only its decoding
// is remembered (decodedTokens), for as long as the stored text is the
// same.
func (a *RedisAdmin) LookupAdminToken(ctx context.Context, h Hash) (AdminToken, bool, error) {
	tokens, _ := a.adminTokenKeys()
	field := h.String()
	v, err := a.Client.HGet(ctx, tokens, field).Result()
	if errors.Is(err, redis.Nil) {
		return AdminToken{}, false, nil
	}
	if err != nil {
		return AdminToken{}, false, fmt.Errorf("keystore: %w", err)
	}
	t, ok := a.decodedTokens.get(v)
	if !ok || !t.Hash.Equal(h) {
		if t, err = decodeAdminToken(field, v); err != nil {
			return AdminToken{}, false, err
		}
		a.decodedTokens.put(v, t)
	}
	if !t.Hash.Equal(h) {
		return AdminToken{}, false, nil
	}
	t.Scopes = slices.Clone(t.Scopes)
	return t, true, nil
}

// tokenDecodings remembers admin token records decoded from their stored
// JSON, by that text: an admin API call's token check then costs its
// HGET, not a JSON decoding too. It holds at most maxDecodedTokens (a
// store has few tokens; when full, it starts over). The zero value is
// empty and ready; it is safe for concurrent use.
type tokenDecodings struct {
	mu sync.Mutex
	m  map[string]AdminToken
}

const maxDecodedTokens = 64

func (d *tokenDecodings) get(v string) (AdminToken, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.m[v]
	return t, ok
}

func (d *tokenDecodings) put(v string, t AdminToken) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= maxDecodedTokens {
		d.m = make(map[string]AdminToken)
	}
	t.Scopes = slices.Clone(t.Scopes)
	d.m[v] = t
}
