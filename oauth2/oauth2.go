// Package oauth2 authenticates requests that carry an OAuth 2.0 bearer
// token: a JWT signed by the configured issuer with a key published in its
// JSON Web Key Set (JWKS). It turns a good token into an auth.Principal
// (client, products from scopes, context, environment) and a bad one into an
// auth.Verdict refusal with an RFC 6750 challenge.
//
// The JWKS is fetched at start, cached, refreshed in the background and on
// demand when a token names an unknown key id; the on-demand refreshes are
// rate-limited so a flood of made-up key ids cannot hammer the issuer.
//
// Decision on an unreachable JWKS at start: New does not fail (API keys keep
// working); it logs a warning, and Authenticate returns an error wrapping
// ErrJWKSUnavailable (which the gateway answers with 503) until a fetch
// succeeds. The first request after start may retry at once; later retries
// are rate-limited by jwks_refresh_min_interval, and the background refresh
// keeps trying too. Once a key set has been fetched it stays in use while the
// issuer is unreachable.
//
// jwks.go holds the key set's lifecycle; claims.go maps a verified token's
// claims to a principal.
package oauth2

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/keygate/keygate/internal/jwscheck"
	"github.com/keygate/keygate/internal/tokencache"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/product"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/keygate/keygate/auth"
)

// Challenges sent in WWW-Authenticate (RFC 6750 §3).
const (
	// ChallengeRealm answers a request without a bearer token.
	ChallengeRealm = `Bearer realm="keygate"`
	// ChallengeInvalidToken answers a malformed, invalid or expired token.
	ChallengeInvalidToken = `Bearer error="invalid_token"`
	// ChallengeInsufficientScope answers a token without any product scope.
	ChallengeInsufficientScope = `Bearer error="insufficient_scope"`
)

// ReasonInsufficientScope is the refusal reason of a valid token that grants
// no product.
const ReasonInsufficientScope auth.Reason = "insufficient_scope"

// ErrJWKSUnavailable is wrapped by the error Authenticate returns when the
// issuer's key set has never been fetched and cannot be fetched now.
var ErrJWKSUnavailable = errors.New("oauth2: issuer key set unavailable")

// Tuning that is not configuration.
const (
	initialFetchWait   = 10 * time.Second // how long New waits for the first JWKS
	fetchTimeout       = 10 * time.Second // one JWKS request
	backgroundMinEvery = 5 * time.Minute  // background refresh, unless Cache-Control says longer
	backgroundMaxEvery = time.Hour        // background refresh at the latest
	maxJWKSBytes       = 1 << 20
	maxIDLen           = 128
	idPrefix           = "oauth2:"
)

// Deps holds what an Authenticator is given rather than builds.
type Deps struct {
	// Logger receives refusals (debug) and JWKS problems (warn). Nil means
	// no logging.
	Logger *zap.Logger
	// HTTPClient fetches the JWKS. Nil means a client with a 10 s timeout
	// that trusts Config.CARoot when set, else the system roots.
	HTTPClient *http.Client
	// Operations resolves the operation names of Config.ProductScopes;
	// nil means the built-in operations.
	Operations *policy.Operations
	// Now is the clock tokens are checked by; nil means time.Now.
	Now func() time.Time
}

// Authenticator checks OAuth 2.0 bearer tokens.
//
// Build it with New; the zero value is not usable. It is safe for
// concurrent use. Close stops its background refresh.
type Authenticator struct {
	cfg Config
	log *zap.Logger

	cache     *jwk.Cache
	res       *httprc.ResourceBase[jwk.Set]
	algs      map[string]jwa.SignatureAlgorithm
	scopes    []productScope // sorted by product
	ops       *policy.Operations
	accessBy  sync.Map // policy.OpSet → *policy.Access; bounded by 2^len(scopes)
	audiences []string
	parseOpts []jwt.ParseOption

	now      func() time.Time
	verified *tokencache.Cache[verified] // see verify

	limiter *rate.Limiter // on-demand JWKS refreshes
	flight  singleflight.Group

	life      context.Context
	stop      context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

// productScope is one entry of product_scopes: the scope, the product
// it opens and the operations it grants.
type productScope struct {
	product, scope string
	grants         policy.OpSet
}

// New builds an Authenticator from a validated-here cfg. With cfg.Enabled
// false it returns an Authenticator that refuses every bearer token with
// auth.ReasonDisabled. Otherwise it starts the JWKS cache and waits (up to
// 10 s, or until ctx ends) for the first fetch; an unreachable JWKS is
// logged, not returned (see the package documentation).
func New(ctx context.Context, cfg Config, deps Deps) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err // it names the field by its YAML path
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if !cfg.Enabled {
		// The auth chain refuses bearer tokens when oauth2 is off; an
		// Authenticator exists only to check them.
		return nil, errors.New("oauth2: New needs auth.oauth2.enabled")
	}
	a := &Authenticator{cfg: cfg, log: log.Named("oauth2"), now: deps.Now, verified: tokencache.New[verified](verifiedCacheSize)}
	if a.now == nil {
		a.now = time.Now
	}

	a.algs = make(map[string]jwa.SignatureAlgorithm, len(cfg.Algorithms))
	for _, name := range cfg.Algorithms {
		alg, ok := jwa.LookupSignatureAlgorithm(name)
		if !ok || alg.IsSymmetric() || !isAllowedAlgorithm(alg.String()) {
			return nil, fieldpath.Errorf("algorithms", "%q is not supported", name)
		}
		a.algs[alg.String()] = alg
	}
	ops := deps.Operations
	if ops == nil {
		ops = policy.BuiltinOperations()
	}
	a.ops = ops
	for name, scope := range cfg.ProductScopes {
		ps := productScope{product: name, scope: scope}
		if product.Valid(name) {
			ps.grants = ops.OfProducts(name)
		} else {
			set, err := ops.Set([]string{name})
			if err != nil {
				return nil, fieldpath.Errorf("product_scopes."+name, "%v", err)
			}
			ps.grants, ps.product = set, name[:strings.IndexByte(name, ':')]
		}
		a.scopes = append(a.scopes, ps)
	}
	sort.Slice(a.scopes, func(i, j int) bool { return a.scopes[i].product < a.scopes[j].product })
	a.audiences = append([]string(nil), cfg.Audiences...)
	a.parseOpts = []jwt.ParseOption{
		jwt.WithKeyProvider(keyProvider{a}),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAcceptableSkew(cfg.Leeway),
		jwt.WithClock(jwt.ClockFunc(a.now)),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithValidator(jwt.ValidatorFunc(a.validateAudience)),
	}
	if cfg.JWKSRefreshMinInterval > 0 {
		a.limiter = rate.NewLimiter(rate.Every(cfg.JWKSRefreshMinInterval), 1)
	} else {
		a.limiter = rate.NewLimiter(rate.Inf, 1)
	}

	hc := deps.HTTPClient
	if hc == nil {
		var err error
		if hc, err = newHTTPClient(cfg.CARoot); err != nil {
			return nil, err
		}
	}

	if err := a.startJWKS(ctx, hc); err != nil {
		return nil, err
	}
	return a, nil
}

// Present reports whether r carries an Authorization header with the Bearer
// scheme, well formed or not.
func (a *Authenticator) Present(r *http.Request) bool {
	for _, v := range r.Header.Values("Authorization") {
		if hasBearerScheme(v) {
			return true
		}
	}
	return false
}

// bearerToken reads r's one bearer token; when there is none, or more
// than one, or it is malformed, it returns the refusal and false.
func bearerToken(r *http.Request) (string, auth.Verdict, bool) {
	tok, hr := parseAuthorization(r.Header.Values("Authorization"))
	switch hr {
	case headerMissing:
		return "", refuse(auth.ReasonMissing, "missing bearer token", ChallengeRealm), false
	case headerNotBearer:
		return "", refuse(auth.ReasonMalformed, "unsupported authorization scheme; use Bearer", ChallengeRealm), false
	case headerDuplicate:
		return "", refuse(auth.ReasonDuplicate, "multiple Authorization headers", ChallengeInvalidToken), false
	case headerMalformed:
		return "", refuse(auth.ReasonMalformed, "malformed bearer token", ChallengeInvalidToken), false
	}
	return tok, auth.Verdict{}, true
}

func refuse(reason auth.Reason, msg, challenge string) auth.Verdict {
	v := auth.Refuse(reason, msg)
	v.Challenge = challenge
	return v
}

// Authenticate checks the bearer token of r. A bad token is a refusal
// (401, or 403 for a token that grants no product); an error means the
// issuer's key set is unavailable (wraps ErrJWKSUnavailable).
func (a *Authenticator) Authenticate(r *http.Request) (auth.Verdict, error) {
	tok, v, ok := bearerToken(r)
	if !ok {
		return v, nil
	}
	return a.verify(r.Context(), tok)
}

func (a *Authenticator) debugRefusal(reason auth.Reason, err error) {
	if ce := a.log.Check(zap.DebugLevel, "bearer token refused"); ce != nil {
		ce.Write(zap.String("reason", string(reason)), zap.Error(err))
	}
}

var (
	errNoSubject    = errors.New("token has neither client_id nor sub")
	errBadContext   = errors.New("context claim is not a safe string")
	errBadEnv       = errors.New("env claim is neither live nor test")
	errNoAlg        = errors.New("token header has no alg")
	errAlgForbidden = errors.New("token alg is not allowed")
	errNoKid        = errors.New("token header has no kid")
	errUnknownKid   = errors.New("token kid is not in the issuer key set")
	errKeyMismatch  = errors.New("issuer key does not fit the token alg")
	errRateLimited  = errors.New("jwks refresh rate-limited")
)

// CacheStats is what the cache of accepted tokens did (see verify).
func (a *Authenticator) CacheStats() tokencache.Stats { return a.verified.Stats() }

// verifiedCacheSize bounds Authenticator.verified: about 300 bytes an
// entry, one entry a token in use (a client keeps its token until it
// expires).
const verifiedCacheSize = 100_000

// verified is what checking an accepted token found: its verdict, and the
// issuer key that verified it.
type verified struct {
	v   auth.Verdict
	exp time.Time
	usedKey
}

// usedKey is where keyProvider notes the key it handed jws, and for which
// alg, when the parse's context carries one.
type usedKey struct {
	kid string
	alg jwa.SignatureAlgorithm
	key jwk.Key
}

// stillFits reports whether key, what the key set now gives for u's kid,
// would verify what u verified: the same key, or (after a refresh of the
// key set, which builds every key anew) one that fits the alg and has the
// same RFC 7638 thumbprint, the same key material.
func (u usedKey) stillFits(key jwk.Key) bool {
	return key == u.key || keyFits(u.alg, key) && jwk.Equal(key, u.key)
}

type usedKeyCtx struct{}

// verify checks raw, or finds it checked before: an accepted token's
// verdict is cached (by its SHA-256) until its expiry, for as long as the
// issuer's key set still gives the same key for its kid. The verdict is
// made of the token's claims and this Authenticator's configuration
// alone, so a hit answers what the check would. A refresh of the key set
// keeps a token cached whose key it still holds unchanged.
func (a *Authenticator) verify(ctx context.Context, raw string) (auth.Verdict, error) {
	return a.verifyKeyed(ctx, raw, tokencache.KeyOf(raw))
}

// verifyKeyed is verify with raw's cache key, computed by the caller.
func (a *Authenticator) verifyKeyed(ctx context.Context, raw string, ck tokencache.Key) (auth.Verdict, error) {
	now := a.now()
	if e, ok := a.verified.Get(ck, now); ok {
		if key, found := lookup(a.res.Resource(), e.kid); found && e.stillFits(key) {
			if key != e.key {
				e.key = key // the same key, from a refreshed set
				a.verified.Add(ck, e, e.exp)
			}
			a.verified.Answered()
			return e.v, nil
		}
		a.verified.Remove(ck) // its key is gone or changed: check it again
	}
	a.verified.Checked()
	// The spelling, crit and the NumericDates first. ECDSA's s is not
	// held to the low half here: common signers (Go's crypto/ecdsa,
	// cloud KMSs) emit either half, so that would refuse about half of an
	// external issuer's good tokens; a high-S twin proves nothing new (it
	// needs a token the issuer signed) and is simply checked on its own.
	if err := jwscheck.Check(raw, jwscheck.Options{MaxLifetime: a.cfg.MaxTokenLifetime, Leeway: a.cfg.Leeway, Now: a.now}); err != nil {
		a.debugRefusal(auth.ReasonInvalid, err)
		return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken), nil
	}
	var used usedKey
	opts := make([]jwt.ParseOption, 0, len(a.parseOpts)+1)
	opts = append(opts, a.parseOpts...)
	opts = append(opts, jwt.WithContext(context.WithValue(ctx, usedKeyCtx{}, &used)))
	t, err := jwt.ParseString(raw, opts...)
	if err != nil {
		if errors.Is(err, ErrJWKSUnavailable) {
			return auth.Verdict{}, fmt.Errorf("oauth2: verify bearer token: %w", err)
		}
		if errors.Is(err, jwt.TokenExpiredError()) {
			a.debugRefusal(auth.ReasonExpired, err)
			return refuse(auth.ReasonExpired, "bearer token expired", ChallengeInvalidToken), nil
		}
		a.debugRefusal(auth.ReasonInvalid, err)
		return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken), nil
	}
	v := a.principalOf(t)
	if exp, ok := t.Expiration(); v.OK && used.key != nil && ok && now.Before(exp) {
		a.verified.Add(ck, verified{v: v, exp: exp, usedKey: used}, exp)
	}
	return v, nil
}
