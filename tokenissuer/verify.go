package tokenissuer

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/internal/jwscheck"
	"github.com/keygate/keygate/internal/tokencache"
	"github.com/keygate/keygate/keystore"
)

// Challenges of a refused token (RFC 6750 §3).
const (
	challengeInvalidToken      = `Bearer error="invalid_token"`
	challengeInsufficientScope = `Bearer error="insufficient_scope"`
)

func refuse(reason auth.Reason, msg string) auth.Verdict {
	v := auth.Refuse(reason, msg)
	v.Challenge = challengeInvalidToken
	return v
}

var (
	errTyp     = errors.New("token typ is not at+jwt")
	errHeader  = errors.New("token is not one compact JWS with alg and kid")
	errKid     = errors.New("token kid is not a published signing key")
	errAlg     = errors.New("token alg does not match its signing key")
	errClaims  = errors.New("token claims are not keygate's")
	errKey     = errors.New("token's key is unknown")
	errContext = errors.New("token context differs from its key's")
)

func (i *Issuer) refused(reason auth.Reason, err error) auth.Verdict {
	if ce := i.log.Check(zap.DebugLevel, "bearer token refused"); ce != nil {
		ce.Write(zap.String("reason", string(reason)), zap.Error(err))
	}
	if reason == auth.ReasonExpired {
		return refuse(reason, "bearer token expired")
	}
	return refuse(reason, "invalid bearer token")
}

// Verify checks a token this issuer signed, with no HTTP call, and turns
// it into the principal of the key that bought it. The key is looked up in
// the keystore on every use: a revoked or expired key, or one past its
// rotation grace, refuses its tokens as soon as the keystore knows. The
// principal is the key's (same id, env, context and limits), with the
// method auth.MethodBearer. An error means the keystore could not answer.
//
// The token's signature and claims are checked once: what they say is
// cached (see verifiedCacheSize) until the token's expiry, for as long as
// the key that signed it is still published under its kid (the same
// thumbprint). Everything that can change while a token lives (the key
// behind it, its state, context, product and permissions) is read again
// on every use, cached or not.
func (i *Issuer) Verify(ctx context.Context, raw string) (auth.Verdict, error) {
	ck := tokencache.KeyOf(raw)
	if v, found, err := i.VerifyChecked(ctx, ck); found {
		return v, err
	}
	return i.VerifyUnchecked(ctx, raw, ck)
}

// VerifyUnchecked is Verify for a token that VerifyChecked did not find:
// it checks raw in full, and caches what it accepts under ck, raw's cache
// key (tokencache.KeyOf), which the caller has already computed.
func (i *Issuer) VerifyUnchecked(ctx context.Context, raw string, ck tokencache.Key) (auth.Verdict, error) {
	ks, now := i.keys.Load(), i.now()
	i.verified.Checked()
	c, v, ok := i.check(ctx, ks, raw)
	if !ok {
		return v, nil
	}
	if now.Before(c.exp) { // not in the leeway after it
		i.verified.Add(ck, c, c.exp)
	}
	return i.principal(ctx, c)
}

// VerifyChecked answers as Verify does for a token this issuer has
// checked and accepted before (found), by the token's cache key
// (tokencache.KeyOf), without a look at the token: from what its check
// found, and the key behind it as it is now. found false means it must go
// to Verify. It lets a router that serves several issuers send a token
// used before to this one without reading it.
func (i *Issuer) VerifyChecked(ctx context.Context, ck tokencache.Key) (v auth.Verdict, found bool, err error) {
	c, ok := i.verified.Get(ck, i.now())
	if !ok {
		return auth.Verdict{}, false, nil
	}
	if k := i.keys.Load().byKid[c.kid]; k == nil || k.thumb != c.thumb {
		// Its signing key was withdrawn: check it again against the keys
		// as they are now (it is refused).
		i.verified.Remove(ck)
		return auth.Verdict{}, false, nil
	}
	i.verified.Answered()
	v, err = i.principal(ctx, c)
	return v, true, err
}

// CacheStats is what the cache of accepted tokens did (see Verify).
func (i *Issuer) CacheStats() tokencache.Stats { return i.verified.Stats() }

// checked is what the check of a token's signature and claims found.
type checked struct {
	kid string
	// thumb is the thumbprint of the key that verified it, which must
	// still be published under kid on a hit. (Not the key itself: a
	// withdrawn key's private half is not kept alive by a cache entry,
	// and a rebuilt key set that still holds the key keeps its tokens
	// cached.)
	thumb [sha256.Size]byte
	exp   time.Time
	// The claims that the key's principal is made of.
	sub, env, scope, context string
}

// check verifies raw's signature with ks and its claims, or returns the
// refusal.
func (i *Issuer) check(ctx context.Context, ks *keySet, raw string) (checked, auth.Verdict, bool) {
	if err := jwscheck.Check(raw, jwscheck.Options{LowS: true, RequireTimes: true, MaxLifetime: i.cfg.TTL}); err != nil {
		return checked{}, i.refused(auth.ReasonMalformed, err), false
	}
	msg, err := jws.Parse([]byte(raw), jws.WithCompact())
	if err != nil || len(msg.Signatures()) != 1 {
		return checked{}, i.refused(auth.ReasonMalformed, errHeader), false
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	typ, _ := hdr.Type()
	if !strings.EqualFold(typ, "at+jwt") && !strings.EqualFold(typ, "application/at+jwt") {
		return checked{}, i.refused(auth.ReasonInvalid, errTyp), false
	}
	kid, okKid := hdr.KeyID()
	alg, okAlg := hdr.Algorithm()
	if !okKid || !okAlg {
		return checked{}, i.refused(auth.ReasonInvalid, errHeader), false
	}
	k := ks.byKid[kid]
	if k == nil {
		return checked{}, i.refused(auth.ReasonInvalid, errKid), false
	}
	if alg != k.alg {
		return checked{}, i.refused(auth.ReasonInvalid, errAlg), false
	}
	t, err := jwt.ParseString(raw,
		jwt.WithKey(k.alg, k.pub),
		jwt.WithIssuer(i.cfg.Issuer),
		jwt.WithAudience(i.cfg.audience()),
		jwt.WithAcceptableSkew(leeway),
		jwt.WithClock(jwt.ClockFunc(i.now)),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithRequiredClaim(jwt.JwtIDKey),
		jwt.WithContext(ctx),
	)
	if err != nil {
		if errors.Is(err, jwt.TokenExpiredError()) {
			return checked{}, i.refused(auth.ReasonExpired, err), false
		}
		return checked{}, i.refused(auth.ReasonInvalid, err), false
	}
	c := checked{kid: kid, thumb: k.thumb}
	c.sub, _ = t.Subject()
	c.exp, _ = t.Expiration() // required above
	var cid string
	_ = t.Get("client_id", &cid)
	_ = t.Get("scope", &c.scope)
	_ = t.Get("env", &c.env)
	if c.sub == "" || cid != c.sub {
		return checked{}, i.refused(auth.ReasonInvalid, errClaims), false
	}
	if name := i.deps.ContextClaim; name != "" {
		_ = t.Get(name, &c.context)
	}
	return c, auth.Verdict{}, true
}

// principal is the principal of the key a checked token stands for, as the
// key is now, or the refusal.
func (i *Issuer) principal(ctx context.Context, c checked) (auth.Verdict, error) {
	h, ok, err := i.hashOf(ctx, c.sub)
	if err != nil {
		return auth.Verdict{}, err
	}
	if !ok {
		return i.refused(auth.ReasonUnknown, errKey), nil
	}
	rec, ok, err := i.deps.Keys.Lookup(ctx, h)
	if err != nil {
		return auth.Verdict{}, err
	}
	if !ok || rec.ID != c.sub || string(rec.Env) != c.env {
		return i.refused(auth.ReasonUnknown, errKey), nil
	}
	switch rec.StateAt(i.now()) {
	case keystore.Active:
	case keystore.Revoked:
		return i.refused(auth.ReasonRevoked, errKey), nil
	default:
		return i.refused(auth.ReasonExpired, errKey), nil
	}
	if i.deps.ContextClaim != "" && c.context != rec.Context {
		return i.refused(auth.ReasonInvalid, errContext), nil
	}
	p := auth.Principal{ID: rec.ID, Name: rec.Name, Env: string(rec.Env), Context: rec.Context, Method: auth.MethodBearer, Limits: rec.Limits}
	if rec.Limits != nil {
		// The token may do what its key may do, from where its key may:
		// the key's permissions, its consumer's and its plan's features,
		// and their address rules, as they are now.
		p.Access = rec.Limits.Access
	}
	if keyScope := i.scopeOf(rec.Product); keyScope != "" {
		for f := range strings.FieldsSeq(c.scope) {
			if f == keyScope {
				p.Products = []string{string(rec.Product)}
			}
		}
	}
	if len(p.Products) == 0 {
		v := auth.Refuse("insufficient_scope", "insufficient scope")
		v.Challenge, v.Status = challengeInsufficientScope, http.StatusForbidden
		return v, nil
	}
	return auth.Verdict{OK: true, Principal: p}, nil
}
