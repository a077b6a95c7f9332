package oauth2

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/internal/capool"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"go.uber.org/zap"
)

// The JWKS lifecycle: the HTTP client, the cache and its refreshes, the
// lookup of a token's key by kid and algorithm, and Close.

// newHTTPClient builds the JWKS client, trusting only caRoot (inline PEM or
// a file path) when it is set.
func newHTTPClient(caRoot string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caRoot != "" {
		pool, err := capool.LoadInline(caRoot)
		if err != nil {
			return nil, fieldpath.Errorf("ca_root", "%w", err)
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
	if u, ok := ctx.Value(usedKeyCtx{}).(*usedKey); ok {
		u.kid, u.alg, u.key = kid, alg, key
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

// startJWKS registers the issuer's key set with a background-refreshed
// cache and waits, briefly, for the first fetch. A failed first fetch is
// logged, not returned: bearer tokens get 503 until a fetch succeeds.
func (a *Authenticator) startJWKS(ctx context.Context, hc *http.Client) error {
	cfg := a.cfg
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
		return fmt.Errorf("oauth2: start jwks cache: %w", err)
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
		return fmt.Errorf("oauth2: register jwks %s: %w", cfg.JWKSURL, err)
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
			return fmt.Errorf("oauth2: waiting for jwks: %w", ctx.Err())
		}
		a.log.Warn("jwks unavailable at start; bearer tokens get 503 until it is fetched",
			zap.String("jwks_url", cfg.JWKSURL), zap.Error(err))
	}
	return nil
}
