// Package auth holds what every authenticator produces: the Principal a
// request acts for, and the Verdict on its credentials. Authenticators (API
// keys in this package, OAuth 2.0 bearer tokens in package oauth2) fill them;
// the gateway consumes them.
package auth

import (
	"time"

	"github.com/keygate/keygate/policy"
)

// Method names how a principal authenticated.
type Method string

const (
	// MethodAPIKey is an x-api-key header.
	MethodAPIKey Method = "api_key"
	// MethodOAuth2 is an OAuth 2.0 bearer token.
	MethodOAuth2 Method = "oauth2"
	// MethodBearer is an access token keygate issued itself for a key
	// (package tokenissuer): the principal is that key.
	MethodBearer Method = "bearer"
)

// Principal is who a request acts for.
type Principal struct {
	// ID identifies the credential: a key's id, or a token's client
	// (sub or client_id). It is safe to log and to send upstream.
	ID string
	// Name is the key's human name, if any.
	Name string
	// Products lists what the principal may call: "extraction", "registry".
	Products []string
	// Env is "live" or "test"; it selects the rate limit.
	Env string
	// Context is the processing configuration the principal is bound to;
	// empty when it is bound to none.
	Context string
	// Method says how the principal authenticated.
	Method Method
	// Limits is the key's effective rate limit and quota, resolved by the
	// key store when the record loaded (plans, overrides, consumer); nil
	// means the env default (ratelimit.limits[Env]), as for OAuth 2.0
	// principals.
	Limits *policy.Effective
	// Access is what the principal may do and where from (operations,
	// allowed_cidrs), resolved when its key loaded or its token was
	// checked; nil means every operation of Products, from anywhere.
	Access *policy.Access
	// LeakedUntil is set on a key found in public and quarantined: it
	// works until then, and its responses carry a warning.
	LeakedUntil time.Time
}

// Allows reports whether the principal may call product.
func (p Principal) Allows(product string) bool {
	for _, x := range p.Products {
		if x == product {
			return true
		}
	}
	return false
}

// Reason is a machine-readable cause of a refusal, used as a metric label.
type Reason string

// Reasons for refusing credentials.
const (
	ReasonMissing   Reason = "missing"
	ReasonMalformed Reason = "malformed"
	ReasonChecksum  Reason = "checksum"
	ReasonUnknown   Reason = "unknown"
	ReasonRevoked   Reason = "revoked"
	ReasonExpired   Reason = "expired"
	ReasonDuplicate Reason = "duplicate"
	ReasonAmbiguous Reason = "ambiguous"
	ReasonInvalid   Reason = "invalid_token"
	ReasonDisabled  Reason = "method_disabled"
)

// Verdict is an authenticator's answer on a request's credentials.
//
// OK with a Principal means the credentials are good. !OK means they are
// bad, which the gateway answers with Status (401 when zero), Message and,
// when set, a WWW-Authenticate Challenge. A failure of the store behind the
// authenticator is not a Verdict but an error.
type Verdict struct {
	OK        bool
	Principal Principal
	Reason    Reason
	Message   string
	Status    int
	Challenge string
}

// Refuse builds a refusal verdict.
func Refuse(reason Reason, message string) Verdict {
	return Verdict{Reason: reason, Message: message}
}
