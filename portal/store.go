package portal

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// kv is where the portal keeps its server-side state: sessions, one-time
// sign-in links and OIDC sign-ins in flight. Keys are hashes of the
// secrets the browser holds, never the secrets. Each value carries its own
// expiry, checked against the portal's clock; the store's TTL only
// reclaims space.
type kv interface {
	put(ctx context.Context, key string, val []byte, ttl time.Duration) error
	get(ctx context.Context, key string) ([]byte, bool, error)
	// take returns the value and deletes it, atomically: of two callers
	// taking the same key, one gets it.
	take(ctx context.Context, key string) ([]byte, bool, error)
	del(ctx context.Context, key string) error
}

// memKV is kv in process, for a single replica (the file keystore).
type memKV struct {
	mu    sync.Mutex
	now   func() time.Time
	items map[string]memItem
	puts  int
}

type memItem struct {
	val     []byte
	expires time.Time
}

func newMemKV(now func() time.Time) *memKV {
	return &memKV{now: now, items: map[string]memItem{}}
}

func (m *memKV) put(_ context.Context, key string, val []byte, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[key] = memItem{val: val, expires: m.now().Add(ttl)}
	// Sweep expired entries now and then, so abandoned sessions and
	// sign-ins do not accumulate.
	if m.puts++; m.puts%256 == 0 {
		now := m.now()
		for k, it := range m.items {
			if now.After(it.expires) {
				delete(m.items, k)
			}
		}
	}
	return nil
}

func (m *memKV) get(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.items[key]
	if !ok || m.now().After(it.expires) {
		return nil, false, nil
	}
	return it.val, true, nil
}

func (m *memKV) take(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it, ok := m.items[key]
	delete(m.items, key)
	if !ok || m.now().After(it.expires) {
		return nil, false, nil
	}
	return it.val, true, nil
}

func (m *memKV) del(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.items, key)
	return nil
}

// redisKV is kv in Redis, shared by every replica.
type redisKV struct {
	c      redis.UniversalClient
	prefix string
}

func (r redisKV) put(ctx context.Context, key string, val []byte, ttl time.Duration) error {
	return r.c.Set(ctx, r.prefix+key, val, ttl).Err()
}

func (r redisKV) get(ctx context.Context, key string) ([]byte, bool, error) {
	b, err := r.c.Get(ctx, r.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return b, err == nil, err
}

func (r redisKV) take(ctx context.Context, key string) ([]byte, bool, error) {
	b, err := r.c.GetDel(ctx, r.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return b, err == nil, err
}

func (r redisKV) del(ctx context.Context, key string) error {
	return r.c.Del(ctx, r.prefix+key).Err()
}

// newSecret returns 32 random bytes, base64url: a session cookie, a CSRF
// token, a one-time link, an OIDC state or nonce or PKCE verifier.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// storeKey is the kv key for a secret: its SHA-256, so that a copy of the
// store holds nothing a browser could present.
func storeKey(kind, secret string) string {
	h := sha256.Sum256([]byte(secret))
	return kind + ":" + hex.EncodeToString(h[:])
}

// Session is a signed-in user's session.
type Session struct {
	// Consumer is the consumer whose keys the session manages.
	Consumer string `json:"consumer"`
	// Subject names the user: the ID token's sub (with the issuer's
	// host), "delegated:" and the admin who made the link, or "demo".
	Subject string `json:"subject"`
	// Display is what the page header shows for the user.
	Display string `json:"display"`
	// CSRF is the token every form of the session carries.
	CSRF      string    `json:"csrf"`
	Created   time.Time `json:"created"`
	LastSeen  time.Time `json:"last_seen"`
	ExpiresAt time.Time `json:"expires_at"` // absolute
}

// sessions are the portal's sessions in a kv.
type sessions struct {
	kv     kv
	now    func() time.Time
	maxAge time.Duration
	idle   time.Duration
}

// create stores a new session and returns its cookie value.
func (s *sessions) create(ctx context.Context, consumer, subject, display string) (string, Session, error) {
	now := s.now()
	sess := Session{Consumer: consumer, Subject: subject, Display: display, CSRF: newSecret(), Created: now, LastSeen: now, ExpiresAt: now.Add(s.maxAge)}
	token := newSecret()
	return token, sess, s.save(ctx, token, sess)
}

func (s *sessions) save(ctx context.Context, token string, sess Session) error {
	b, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	return s.kv.put(ctx, storeKey("session", token), b, min(s.idle, sess.ExpiresAt.Sub(s.now())))
}

// get returns the session of a cookie value, if it is live: not past its
// absolute expiry nor idle too long. A live session's last use is
// refreshed, at most once a minute so that reads do not all write.
func (s *sessions) get(ctx context.Context, token string) (Session, bool, error) {
	if token == "" {
		return Session{}, false, nil
	}
	b, ok, err := s.kv.get(ctx, storeKey("session", token))
	if err != nil || !ok {
		return Session{}, false, err
	}
	sess, ok := decode[Session](b)
	if !ok { // a damaged record is no session
		return Session{}, false, nil
	}
	now := s.now()
	if !now.Before(sess.ExpiresAt) || now.Sub(sess.LastSeen) >= s.idle {
		_ = s.kv.del(ctx, storeKey("session", token))
		return Session{}, false, nil
	}
	if now.Sub(sess.LastSeen) >= time.Minute {
		sess.LastSeen = now
		if err := s.save(ctx, token, sess); err != nil {
			return Session{}, false, err
		}
	}
	return sess, true, nil
}

func (s *sessions) delete(ctx context.Context, token string) error {
	return s.kv.del(ctx, storeKey("session", token))
}

// onceValue is what a one-time secret (a delegated sign-in link, an OIDC
// sign-in in flight) stands for.
type onceValue struct {
	Consumer  string    `json:"consumer,omitempty"`
	Subject   string    `json:"subject,omitempty"`
	Verifier  string    `json:"verifier,omitempty"`
	Nonce     string    `json:"nonce,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// putOnce stores v under a new secret, returned, valid for ttl.
func putOnce(ctx context.Context, k kv, kind string, v onceValue, now time.Time, ttl time.Duration) (string, error) {
	v.ExpiresAt = now.Add(ttl)
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	secret := newSecret()
	return secret, k.put(ctx, storeKey(kind, secret), b, ttl)
}

// takeOnce returns what secret stands for and forgets it: it works once,
// and not after its expiry.
func takeOnce(ctx context.Context, k kv, kind, secret string, now time.Time) (onceValue, bool, error) {
	if secret == "" {
		return onceValue{}, false, nil
	}
	b, ok, err := k.take(ctx, storeKey(kind, secret))
	if err != nil || !ok {
		return onceValue{}, false, err
	}
	v, ok := decode[onceValue](b)
	if !ok || !now.Before(v.ExpiresAt) { // damaged or expired: not valid
		return onceValue{}, false, nil
	}
	return v, true, nil
}

// decode reads a stored JSON record; false if it is damaged.
func decode[T any](b []byte) (T, bool) {
	var v T
	return v, json.Unmarshal(b, &v) == nil
}
