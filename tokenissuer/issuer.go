package tokenissuer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/tokencache"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// Paths of the endpoints, on the API listener.
const (
	TokenPath    = "/oauth2/token"
	MetadataPath = "/.well-known/oauth-authorization-server"
	JWKSPath     = "/.well-known/jwks.json"
)

// Tuning that is not configuration.
const (
	// refreshEvery is how often the signing keys are re-read from the
	// Store (a rotation elsewhere reaches this replica within it).
	refreshEvery = time.Second
	// leeway is the clock skew allowed on exp, nbf and iat.
	leeway = 30 * time.Second
	// jwksMaxAge is the JWKS's Cache-Control max-age: far shorter than
	// the overlap a retired key stays published (its tokens' lifetime).
	jwksMaxAge = 5 * time.Minute
	// MaxFormBytes caps a token request's body.
	MaxFormBytes = 4 << 10
)

// IssueLimit is the issuance rate limit per key id: a client should
// reuse its token until it nearly expires, not ask for one per call.
var IssueLimit = policy.Limit{Rate: 20, Per: time.Minute, Burst: 10}

// KeyLookup finds a key record by its hash (the keystore).
type KeyLookup interface {
	Lookup(ctx context.Context, h keystore.Hash) (keystore.Record, bool, error)
}

// FailureLimiter counts failed client authentications against their
// source address (auth.failure_limit).
type FailureLimiter interface {
	Blocked(addr netip.Addr) (time.Duration, bool)
	Fail(ctx context.Context, addr netip.Addr) (time.Duration, bool)
}

// Limiter is the rate limiter that holds the issuance limit.
type Limiter interface {
	Allow(ctx context.Context, id string, lim policy.Limit) (ratelimit.Decision, error)
}

// Auditor records signing-key rotations.
type Auditor interface {
	SigningKeyRotated(ctx context.Context, kid, alg string, immediately bool)
}

// Deps are an Issuer's collaborators.
type Deps struct {
	// Store holds the signing keys and key references. Required.
	Store Store
	// Keys is the keystore. Required.
	Keys KeyLookup
	// ProductScopes maps a product to its scope (auth.oauth2.product_scopes).
	ProductScopes map[string]string
	// ContextClaim names the context claim (auth.oauth2.context_claim).
	ContextClaim string
	// Failures, when set, is auth.failure_limit.
	Failures FailureLimiter
	// ClientAddr names a request's client (server.trusted_proxies); nil
	// means the peer address.
	ClientAddr func(*http.Request) netip.Addr
	// Limiter, when set, holds IssueLimit per key id.
	Limiter Limiter
	// Auditor, when set, records rotations.
	Auditor Auditor
	Logger  *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Issuer issues and validates keygate's own access tokens. Build it with
// New; it is safe for concurrent use; Close stops its refresh.
type Issuer struct {
	cfg    Config
	deps   Deps
	log    *zap.Logger
	now    func() time.Time
	keys   atomic.Pointer[keySet]
	scopes []productScope // sorted by product
	meta   []byte

	// refs caches key id -> keystore.Hash (never changes) for the keys of
	// the tokens in use: bounded, so that a fleet whose million keys all
	// once had a token does not keep a million entries in every replica
	// (an evicted one is read from the Store again, one round trip).
	refs *lru.Cache[string, keystore.Hash]
	// verified caches what the signature and claims of the tokens in use
	// said (see Verify).
	verified *tokencache.Cache[checked]

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type productScope struct{ product, scope string }

// New builds an Issuer from a valid, enabled cfg, making the first signing
// key when the Store has none, and starts re-reading the keys every second.
func New(ctx context.Context, cfg Config, deps Deps) (*Issuer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled || deps.Store == nil || deps.Keys == nil {
		return nil, errors.New("tokenissuer: New needs an enabled config, a Store and a key lookup")
	}
	if len(deps.ProductScopes) == 0 {
		return nil, errors.New("tokenissuer: no product scopes (auth.oauth2.product_scopes)")
	}
	i := &Issuer{cfg: cfg, deps: deps, log: deps.Logger, now: deps.Now, refs: newRefCache(refCacheSize), verified: tokencache.New[checked](verifiedCacheSize), stop: make(chan struct{}), done: make(chan struct{})}
	if i.log == nil {
		i.log = zap.NewNop()
	}
	i.log = i.log.Named("tokenissuer")
	if i.now == nil {
		i.now = time.Now
	}
	for p, s := range deps.ProductScopes {
		i.scopes = append(i.scopes, productScope{p, s})
	}
	sort.Slice(i.scopes, func(a, b int) bool { return i.scopes[a].product < i.scopes[b].product })
	i.meta = i.metadata()
	if err := i.refresh(ctx); err != nil {
		return nil, err
	}
	go i.loop()
	return i, nil
}

// Close stops the background refresh.
func (i *Issuer) Close() error {
	i.once.Do(func() { close(i.stop); <-i.done })
	return nil
}

// Issuer is the iss of the tokens it issues.
func (i *Issuer) Issuer() string { return i.cfg.Issuer }

func (i *Issuer) loop() {
	defer close(i.done)
	t := time.NewTicker(refreshEvery)
	defer t.Stop()
	for {
		select {
		case <-i.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := i.refresh(ctx); err != nil {
				i.log.Warn("signing keys: refresh failed; the last keys stay in use", zap.Error(err))
			}
			cancel()
		}
	}
}

// refresh reads the keys, rotating first when the signing key is due (or
// missing), and swaps in the new set.
func (i *Issuer) refresh(ctx context.Context) error {
	now := i.now()
	st, err := i.deps.Store.Load(ctx)
	if err != nil {
		return err
	}
	if k, ok := signing(st); !ok || now.Sub(k.Created) >= i.cfg.Rotation || k.Alg != i.cfg.Algorithm {
		var rotated *StoredKey
		st, err = i.deps.Store.Update(ctx, func(st *State) (bool, error) {
			if k, ok := signing(*st); ok && now.Sub(k.Created) < i.cfg.Rotation && k.Alg == i.cfg.Algorithm {
				return false, nil // another replica did it
			}
			nk, err := rotate(st, i.cfg.Algorithm, now, i.cfg.TTL+leeway, false)
			rotated = &nk
			return err == nil, err
		})
		if err != nil {
			return err
		}
		if rotated != nil {
			i.log.Info("signing keys: rotated", zap.String("kid", rotated.Kid), zap.String("alg", rotated.Alg), zap.Bool("scheduled", true))
			if i.deps.Auditor != nil {
				i.deps.Auditor.SigningKeyRotated(ctx, rotated.Kid, rotated.Alg, false)
			}
		}
	}
	if cur := i.keys.Load(); cur != nil && sameKeys(cur.state, st) && (cur.nextWithdraw.IsZero() || now.Before(cur.nextWithdraw)) {
		return nil // nothing changed: no re-parse of the keys every second
	}
	ks, err := buildKeySet(st, now)
	if err != nil {
		return err
	}
	if ks.signer == nil {
		return errors.New("tokenissuer: no signing key")
	}
	i.keys.Store(ks)
	return nil
}

// Rotate makes a new signing key at once. The previous keys stay
// published until their tokens expire, or, with immediately, are
// withdrawn now and their tokens refused (every replica within a second).
func Rotate(ctx context.Context, s Store, cfg Config, immediately bool, now time.Time) (KeyInfo, error) {
	var nk StoredKey
	_, err := s.Update(ctx, func(st *State) (bool, error) {
		var err error
		nk, err = rotate(st, cfg.Algorithm, now, cfg.TTL+leeway, immediately)
		return err == nil, err
	})
	if err != nil {
		return KeyInfo{}, err
	}
	return KeyInfo{Kid: nk.Kid, Alg: nk.Alg, Created: nk.Created, Signing: true}, nil
}

// List shows the stored keys, newest last, without their private parts.
func List(ctx context.Context, s Store, now time.Time) ([]KeyInfo, error) {
	st, err := s.Load(ctx)
	if err != nil {
		return nil, err
	}
	var out []KeyInfo
	for _, k := range st.Keys {
		if !k.Withdraw.IsZero() && !now.Before(k.Withdraw) {
			continue
		}
		out = append(out, KeyInfo{Kid: k.Kid, Alg: k.Alg, Created: k.Created, Retiring: k.Retiring, Withdraw: k.Withdraw, Signing: k.Retiring.IsZero()})
	}
	return out, nil
}

// RefreshNow re-reads the signing keys (tests, and the CLI's rotate on a
// running replica is seen within a second anyway).
func (i *Issuer) RefreshNow(ctx context.Context) error { return i.refresh(ctx) }

// refCacheSize bounds Issuer.refs: about 100 bytes an entry.
const refCacheSize = 100_000

// verifiedCacheSize bounds Issuer.verified: about 250 bytes an entry, one
// entry a token in use (a client keeps its token until it expires).
const verifiedCacheSize = 100_000

func newRefCache(size int) *lru.Cache[string, keystore.Hash] {
	c, err := lru.New[string, keystore.Hash](size)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}

func newJTI() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// hashOf finds the key hash a key id stands for: from memory, else from
// the Store (a token minted on another replica).
func (i *Issuer) hashOf(ctx context.Context, id string) (keystore.Hash, bool, error) {
	if h, ok := i.refs.Get(id); ok {
		return h, true, nil
	}
	s, ok, err := i.deps.Store.GetRef(ctx, id)
	if err != nil || !ok {
		return keystore.Hash{}, false, err
	}
	h, err := keystore.ParseHash(s)
	if err != nil {
		return keystore.Hash{}, false, fmt.Errorf("tokenissuer: stored reference of %s: %w", id, err)
	}
	i.refs.Add(id, h)
	return h, true, nil
}
