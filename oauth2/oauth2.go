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
package oauth2

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
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
}

// Authenticator checks OAuth 2.0 bearer tokens.
//
// Build it with New; the zero value is not usable. It is safe for
// concurrent use. Close stops its background refresh.
type Authenticator struct {
	cfg     Config
	log     *zap.Logger
	enabled bool

	cache     *jwk.Cache
	res       *httprc.ResourceBase[jwk.Set]
	algs      map[string]jwa.SignatureAlgorithm
	scopes    []productScope // sorted by product
	audiences []string
	parseOpts []jwt.ParseOption

	limiter *rate.Limiter // on-demand JWKS refreshes
	flight  singleflight.Group

	life      context.Context
	stop      context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

type productScope struct{ product, scope string }

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
	a := &Authenticator{cfg: cfg, log: log.Named("oauth2"), enabled: cfg.Enabled}
	if !cfg.Enabled {
		return a, nil
	}

	a.algs = make(map[string]jwa.SignatureAlgorithm, len(cfg.Algorithms))
	for _, name := range cfg.Algorithms {
		alg, ok := jwa.LookupSignatureAlgorithm(name)
		if !ok || alg.IsSymmetric() || !isAllowedAlgorithm(alg.String()) {
			return nil, fmt.Errorf("auth.oauth2.algorithms: %q is not supported", name)
		}
		a.algs[alg.String()] = alg
	}
	for prod, scope := range cfg.ProductScopes {
		a.scopes = append(a.scopes, productScope{product: prod, scope: scope})
	}
	sort.Slice(a.scopes, func(i, j int) bool { return a.scopes[i].product < a.scopes[j].product })
	a.audiences = append([]string(nil), cfg.Audiences...)
	a.parseOpts = []jwt.ParseOption{
		jwt.WithKeyProvider(keyProvider{a}),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAcceptableSkew(cfg.Leeway),
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

	a.life, a.stop = context.WithCancel(context.WithoutCancel(ctx))
	firstErr := make(chan error, 1)
	sink := errsink.NewFunc(func(_ context.Context, err error) {
		a.log.Warn("jwks refresh failed", zap.String("jwks_url", cfg.JWKSURL), zap.Error(err))
		select {
		case firstErr <- err:
		default:
		}
	})
	cache, err := jwk.NewCache(a.life, httprc.NewClient(httprc.WithErrorSink(sink), httprc.WithWorkers(1)))
	if err != nil {
		a.stop()
		return nil, fmt.Errorf("oauth2: start jwks cache: %w", err)
	}
	a.cache = cache
	err = cache.Register(a.life, cfg.JWKSURL,
		jwk.WithHTTPClient(hc),
		jwk.WithWaitReady(false),
		jwk.WithMinInterval(backgroundMinEvery),
		jwk.WithMaxInterval(backgroundMaxEvery),
		jwk.WithMaxFetchBodySize(maxJWKSBytes),
	)
	if err == nil {
		a.res, err = cache.LookupResource(a.life, cfg.JWKSURL)
	}
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("oauth2: register jwks %s: %w", cfg.JWKSURL, err)
	}

	// Wait for the first fetch to succeed or fail.
	wait, cancel := context.WithTimeout(ctx, initialFetchWait)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- a.res.Ready(wait) }()
	select {
	case err = <-ready:
	case err = <-firstErr:
	}
	if err != nil {
		if ctx.Err() != nil {
			_ = a.Close()
			return nil, fmt.Errorf("oauth2: waiting for jwks: %w", ctx.Err())
		}
		a.log.Warn("jwks unavailable at start; bearer tokens get 503 until it is fetched",
			zap.String("jwks_url", cfg.JWKSURL), zap.Error(err))
	}
	return a, nil
}

// newHTTPClient builds the JWKS client, trusting only caRoot (inline PEM or
// a file path) when it is set.
func newHTTPClient(caRoot string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caRoot != "" {
		pemBytes := []byte(caRoot)
		if !strings.HasPrefix(strings.TrimSpace(caRoot), "-----BEGIN") {
			b, err := os.ReadFile(caRoot)
			if err != nil {
				return nil, fmt.Errorf("auth.oauth2.ca_root: %w", err)
			}
			pemBytes = b
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, errors.New("auth.oauth2.ca_root: no PEM certificate found")
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return &http.Client{
		Timeout:   fetchTimeout,
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "https" || len(via) >= 3 {
				return errors.New("oauth2: jwks redirect refused")
			}
			return nil
		},
	}, nil
}

// Close stops the background JWKS refresh. It is safe to call more than
// once.
func (a *Authenticator) Close() error {
	a.closeOnce.Do(func() {
		if a.cache != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			a.closeErr = a.cache.Shutdown(ctx)
		}
		if a.stop != nil {
			a.stop()
		}
	})
	return a.closeErr
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

func refuse(reason auth.Reason, msg, challenge string) auth.Verdict {
	v := auth.Refuse(reason, msg)
	v.Challenge = challenge
	return v
}

// Authenticate checks the bearer token of r. A bad token is a refusal
// (401, or 403 for a token that grants no product); an error means the
// issuer's key set is unavailable (wraps ErrJWKSUnavailable).
func (a *Authenticator) Authenticate(r *http.Request) (auth.Verdict, error) {
	tok, hr := parseAuthorization(r.Header.Values("Authorization"))
	switch hr {
	case headerMissing:
		return refuse(auth.ReasonMissing, "missing bearer token", ChallengeRealm), nil
	case headerNotBearer:
		return refuse(auth.ReasonMalformed, "unsupported authorization scheme; use Bearer", ChallengeRealm), nil
	case headerDuplicate:
		return refuse(auth.ReasonDuplicate, "multiple Authorization headers", ChallengeInvalidToken), nil
	case headerMalformed:
		return refuse(auth.ReasonMalformed, "malformed bearer token", ChallengeInvalidToken), nil
	}
	if !a.enabled {
		return refuse(auth.ReasonDisabled, "bearer tokens are not accepted", ChallengeRealm), nil
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

func (a *Authenticator) verify(ctx context.Context, raw string) (auth.Verdict, error) {
	opts := make([]jwt.ParseOption, 0, len(a.parseOpts)+1)
	opts = append(opts, a.parseOpts...)
	opts = append(opts, jwt.WithContext(ctx))
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

	id, _ := stringClaim(t, "client_id")
	if id == "" {
		id, _ = t.Subject()
	}
	if id == "" {
		a.debugRefusal(auth.ReasonInvalid, errNoSubject)
		return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken), nil
	}
	p := auth.Principal{ID: sanitizeID(id), Env: "live", Method: auth.MethodOAuth2}

	if c := a.cfg.ContextClaim; c != "" && t.Has(c) {
		v, ok := stringClaim(t, c)
		if !ok || !isSafeValue(v) {
			a.debugRefusal(auth.ReasonInvalid, errBadContext)
			return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken), nil
		}
		p.Context = v
	}
	if c := a.cfg.EnvClaim; c != "" && t.Has(c) {
		v, _ := stringClaim(t, c)
		if v != "live" && v != "test" {
			a.debugRefusal(auth.ReasonInvalid, errBadEnv)
			return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken), nil
		}
		p.Env = v
	}

	scope, _ := stringClaim(t, "scope")
	var scp any
	_ = t.Get("scp", &scp)
	for _, ps := range a.scopes {
		if hasScope(scope, scp, ps.scope) {
			p.Products = append(p.Products, ps.product)
		}
	}
	if len(p.Products) == 0 {
		a.debugRefusal(ReasonInsufficientScope, nil)
		v := refuse(ReasonInsufficientScope, "insufficient scope", ChallengeInsufficientScope)
		v.Status = http.StatusForbidden
		return v, nil
	}
	return auth.Verdict{OK: true, Principal: p}, nil
}

// validateAudience passes a token whose aud holds any configured audience.
func (a *Authenticator) validateAudience(_ context.Context, t jwt.Token) error {
	auds, _ := t.Audience()
	for _, got := range auds {
		for _, want := range a.audiences {
			if got == want {
				return nil
			}
		}
	}
	return jwt.ValidateError()
}

func stringClaim(t jwt.Token, name string) (string, bool) {
	var v any
	if err := t.Get(name, &v); err != nil {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

// hasScope reports whether want is among the space-separated scope string
// or the scp claim (a string or an array of strings).
func hasScope(scope string, scp any, want string) bool {
	if inFields(scope, want) {
		return true
	}
	switch v := scp.(type) {
	case string:
		return inFields(v, want)
	case []string:
		for _, s := range v {
			if s == want {
				return true
			}
		}
	case []any:
		for _, s := range v {
			if s, ok := s.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}

func inFields(s, want string) bool {
	for f := range strings.FieldsSeq(s) {
		if f == want {
			return true
		}
	}
	return false
}

func isSafeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == ':' || c == '@'
}

// isSafeValue reports whether s is 1 to 128 header- and log-safe bytes.
func isSafeValue(s string) bool {
	if s == "" || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isSafeByte(s[i]) {
			return false
		}
	}
	return true
}

// sanitizeID prefixes a token's client id and replaces unsafe bytes.
func sanitizeID(s string) string {
	if len(s) > maxIDLen {
		s = s[:maxIDLen]
	}
	if isSafeValue(s) {
		return idPrefix + s
	}
	b := make([]byte, 0, len(idPrefix)+len(s))
	b = append(b, idPrefix...)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isSafeByte(c) {
			c = '_'
		}
		b = append(b, c)
	}
	return string(b)
}

// keyProvider hands jws the issuer key named by a token's kid, after
// checking that the token's alg is allowed and fits the key.
type keyProvider struct{ a *Authenticator }

func (kp keyProvider) FetchKeys(ctx context.Context, sink jws.KeySink, sig *jws.Signature, _ *jws.Message) error {
	a := kp.a
	h := sig.ProtectedHeaders()
	hdrAlg, ok := h.Algorithm()
	if !ok {
		return errNoAlg
	}
	alg, ok := a.algs[hdrAlg.String()]
	if !ok {
		return errAlgForbidden
	}
	kid, ok := h.KeyID()
	if !ok || kid == "" {
		return errNoKid
	}
	key, found := lookup(a.res.Resource(), kid)
	if !found {
		_, err := a.refresh(ctx)
		set := a.res.Resource() // a concurrent refresh may have succeeded
		if set == nil {
			if err == nil {
				err = errors.New("empty key set")
			}
			return fmt.Errorf("%w: %w", ErrJWKSUnavailable, err)
		}
		if key, found = lookup(set, kid); !found {
			return errUnknownKid
		}
	}
	if !keyFits(alg, key) {
		return errKeyMismatch
	}
	sink.Key(alg, key)
	return nil
}

func lookup(set jwk.Set, kid string) (jwk.Key, bool) {
	if set == nil {
		return nil, false
	}
	return set.LookupKeyID(kid)
}

// refresh fetches the JWKS anew, at most once per JWKSRefreshMinInterval;
// concurrent callers share one fetch.
func (a *Authenticator) refresh(ctx context.Context) (jwk.Set, error) {
	ch := a.flight.DoChan("jwks", func() (any, error) {
		if !a.limiter.Allow() {
			return nil, errRateLimited
		}
		fctx, cancel := context.WithTimeout(a.life, fetchTimeout)
		defer cancel()
		set, err := a.cache.Refresh(fctx, a.cfg.JWKSURL)
		if err != nil {
			a.log.Warn("jwks refresh failed", zap.String("jwks_url", a.cfg.JWKSURL), zap.Error(err))
			return nil, err
		}
		a.log.Info("jwks refreshed on unknown key id", zap.String("jwks_url", a.cfg.JWKSURL), zap.Int("keys", set.Len()))
		return set, nil
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(jwk.Set), nil
	}
}

type curved interface {
	Crv() (jwa.EllipticCurveAlgorithm, bool)
}

// keyFits reports whether key may verify alg: right key type and curve, a
// signing key, and no different alg pinned on the key.
func keyFits(alg jwa.SignatureAlgorithm, key jwk.Key) bool {
	if use, ok := key.KeyUsage(); ok && use != "sig" {
		return false
	}
	if ka, ok := key.Algorithm(); ok && ka.String() != alg.String() {
		return false
	}
	curve := func(want jwa.EllipticCurveAlgorithm) bool {
		c, ok := key.(curved)
		if !ok {
			return false
		}
		got, ok := c.Crv()
		return ok && got.String() == want.String()
	}
	kty := key.KeyType().String()
	switch alg.String() {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		return kty == jwa.RSA().String()
	case "ES256":
		return kty == jwa.EC().String() && curve(jwa.P256())
	case "ES384":
		return kty == jwa.EC().String() && curve(jwa.P384())
	case "ES512":
		return kty == jwa.EC().String() && curve(jwa.P521())
	case "EdDSA":
		return kty == jwa.OKP().String() && curve(jwa.Ed25519())
	}
	return false
}
