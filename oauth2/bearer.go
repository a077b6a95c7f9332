package oauth2

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/internal/tokencache"
)

// LocalIssuer is keygate's own token issuer (package tokenissuer): it
// checks the tokens it signed, locally, and maps them to their key.
type LocalIssuer interface {
	Issuer() string
	// VerifyChecked answers for a token it has accepted before (found),
	// by the token's cache key, without reading the token.
	VerifyChecked(ctx context.Context, key tokencache.Key) (v auth.Verdict, found bool, err error)
	// VerifyUnchecked checks a token VerifyChecked did not find, in full;
	// key is its cache key.
	VerifyUnchecked(ctx context.Context, raw string, key tokencache.Key) (auth.Verdict, error)
}

// Bearer authenticates every bearer token: those of keygate's own issuer
// (Local) and those of the external issuer (External, auth.oauth2). A
// token goes to the issuer its iss names and is checked only with that
// issuer's keys, so neither issuer's keys ever validate the other's
// tokens. Either may be nil, not both. It is safe for concurrent use.
type Bearer struct {
	Local    LocalIssuer
	External *Authenticator
}

var _ auth.Credential = (*Bearer)(nil)

// NewBearer combines the two issuers.
func NewBearer(local LocalIssuer, external *Authenticator) (*Bearer, error) {
	if local == nil && external == nil {
		return nil, errors.New("oauth2: no token issuer")
	}
	if local != nil && external != nil && local.Issuer() == external.cfg.Issuer {
		return nil, errors.New("oauth2: auth.oauth2.issuer must differ from auth.token_endpoint.issuer")
	}
	return &Bearer{Local: local, External: external}, nil
}

// Present reports whether r carries a Bearer Authorization header.
func (b *Bearer) Present(r *http.Request) bool {
	for _, v := range r.Header.Values("Authorization") {
		if hasBearerScheme(v) {
			return true
		}
	}
	return false
}

// Authenticate checks the bearer token with the issuer its iss names.
func (b *Bearer) Authenticate(r *http.Request) (auth.Verdict, error) {
	tok, v, ok := bearerToken(r)
	if !ok {
		return v, nil
	}
	ck := tokencache.KeyOf(tok)
	if b.Local != nil {
		// A token the local issuer accepted before needs no routing (its
		// iss was the local issuer's): no decoding of its claims here.
		if v, found, err := b.Local.VerifyChecked(r.Context(), ck); found {
			return v, err
		}
		if unverifiedIssuer(tok) == b.Local.Issuer() {
			return b.Local.VerifyUnchecked(r.Context(), tok, ck)
		}
	}
	if b.External != nil {
		return b.External.verifyKeyed(r.Context(), tok, ck)
	}
	return refuse(auth.ReasonInvalid, "invalid bearer token", ChallengeInvalidToken), nil
}

// unverifiedIssuer reads the iss of a compact JWS without checking it;
// it only chooses which issuer's keys check the token.
func unverifiedIssuer(tok string) string {
	_, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return ""
	}
	payload, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return ""
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.Iss
}
