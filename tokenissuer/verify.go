package tokenissuer

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"

	"github.com/keygate/keygate/auth"
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
func (i *Issuer) Verify(ctx context.Context, raw string) (auth.Verdict, error) {
	ks := i.keys.Load()
	msg, err := jws.Parse([]byte(raw), jws.WithCompact())
	if err != nil || len(msg.Signatures()) != 1 {
		return i.refused(auth.ReasonMalformed, errHeader), nil
	}
	hdr := msg.Signatures()[0].ProtectedHeaders()
	typ, _ := hdr.Type()
	if !strings.EqualFold(typ, "at+jwt") && !strings.EqualFold(typ, "application/at+jwt") {
		return i.refused(auth.ReasonInvalid, errTyp), nil
	}
	kid, okKid := hdr.KeyID()
	alg, okAlg := hdr.Algorithm()
	if !okKid || !okAlg {
		return i.refused(auth.ReasonInvalid, errHeader), nil
	}
	k := ks.byKid[kid]
	if k == nil {
		return i.refused(auth.ReasonInvalid, errKid), nil
	}
	if alg != k.alg {
		return i.refused(auth.ReasonInvalid, errAlg), nil
	}
	t, err := jwt.ParseString(raw,
		jwt.WithKey(k.alg, k.pub),
		jwt.WithIssuer(i.cfg.Issuer),
		jwt.WithAudience(i.cfg.audience()),
		jwt.WithAcceptableSkew(leeway),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithRequiredClaim(jwt.JwtIDKey),
		jwt.WithContext(ctx),
	)
	if err != nil {
		if errors.Is(err, jwt.TokenExpiredError()) {
			return i.refused(auth.ReasonExpired, err), nil
		}
		return i.refused(auth.ReasonInvalid, err), nil
	}
	sub, _ := t.Subject()
	var cid, scope, env string
	_ = t.Get("client_id", &cid)
	_ = t.Get("scope", &scope)
	_ = t.Get("env", &env)
	if sub == "" || cid != sub {
		return i.refused(auth.ReasonInvalid, errClaims), nil
	}
	h, ok, err := i.hashOf(ctx, sub)
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
	if !ok || rec.ID != sub || string(rec.Env) != env {
		return i.refused(auth.ReasonUnknown, errKey), nil
	}
	switch rec.StateAt(i.now()) {
	case keystore.Active:
	case keystore.Revoked:
		return i.refused(auth.ReasonRevoked, errKey), nil
	default:
		return i.refused(auth.ReasonExpired, errKey), nil
	}
	if c := i.deps.ContextClaim; c != "" {
		var got string
		_ = t.Get(c, &got)
		if got != rec.Context {
			return i.refused(auth.ReasonInvalid, errContext), nil
		}
	}
	p := auth.Principal{ID: rec.ID, Name: rec.Name, Env: string(rec.Env), Context: rec.Context, Method: auth.MethodBearer, Limits: rec.Limits}
	if rec.Limits != nil {
		// The token may do what its key may do, from where its key may:
		// the key's permissions, its consumer's and its plan's features,
		// and their address rules, as they are now.
		p.Access = rec.Limits.Access
	}
	if keyScope := i.scopeOf(rec.Product); keyScope != "" {
		for f := range strings.FieldsSeq(scope) {
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
