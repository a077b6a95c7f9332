package oauth2

import (
	"context"
	"net/http"
	"strings"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/policy"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// Claims to principal: the audience check, scopes to products, and the
// claim values a principal may carry.

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

// principalOf maps a verified token's claims to the principal it stands
// for: its client (client_id, else sub), context and env claims, and the
// products its scopes grant (403 insufficient_scope when none).
func (a *Authenticator) principalOf(t jwt.Token) auth.Verdict {
	id, _ := stringClaim(t, "client_id")
	if id == "" {
		id, _ = t.Subject()
	}
	if id == "" {
		a.debugRefusal(auth.ReasonInvalid, errNoSubject)
		return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken)
	}
	p := auth.Principal{ID: sanitizeID(id), Env: "live", Method: auth.MethodOAuth2}

	if c := a.cfg.ContextClaim; c != "" && t.Has(c) {
		v, ok := stringClaim(t, c)
		if !ok || !isSafeValue(v) {
			a.debugRefusal(auth.ReasonInvalid, errBadContext)
			return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken)
		}
		p.Context = v
	}
	if c := a.cfg.EnvClaim; c != "" && t.Has(c) {
		v, _ := stringClaim(t, c)
		if v != "live" && v != "test" {
			a.debugRefusal(auth.ReasonInvalid, errBadEnv)
			return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken)
		}
		p.Env = v
	}

	scope, _ := stringClaim(t, "scope")
	var scp any
	_ = t.Get("scp", &scp)
	var grants policy.OpSet
	for _, ps := range a.scopes {
		if hasScope(scope, scp, ps.scope) {
			grants |= ps.grants
			if !p.Allows(ps.product) {
				p.Products = append(p.Products, ps.product)
			}
		}
	}
	p.Access = a.access(grants)
	if len(p.Products) == 0 {
		a.debugRefusal(ReasonInsufficientScope, nil)
		v := refuse(ReasonInsufficientScope, "insufficient scope", ChallengeInsufficientScope)
		v.Status = http.StatusForbidden
		return v
	}
	return auth.Verdict{OK: true, Principal: p}
}

// access is the Access of a token whose scopes grant grants: those
// operations, from any address. The few combinations are built once.
func (a *Authenticator) access(grants policy.OpSet) *policy.Access {
	if v, ok := a.accessBy.Load(grants); ok {
		return v.(*policy.Access)
	}
	v, _ := a.accessBy.LoadOrStore(grants, policy.Grant(a.ops, grants))
	return v.(*policy.Access)
}
