package tokenissuer

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/jwscheck"
	"github.com/keygate/keygate/keystore"
)

// oauthError is an RFC 6749 §5.2 error response.
type oauthError struct {
	status int
	code   string
	desc   string
	retry  time.Duration
}

func (e *oauthError) Error() string { return e.code + ": " + e.desc }

func invalidRequest(desc string) *oauthError {
	return &oauthError{status: http.StatusBadRequest, code: "invalid_request", desc: desc}
}

var errInvalidClient = &oauthError{status: http.StatusUnauthorized, code: "invalid_client", desc: "client authentication failed"}

// tokenResponse is the RFC 6749 §5.1 success body.
type tokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
	Scope       string `json:"scope"`
}

// TokenHandler answers POST /oauth2/token: the client_credentials grant.
func (i *Issuer) TokenHandler() http.Handler { return http.HandlerFunc(i.serveToken) }

func (i *Issuer) clientAddr(r *http.Request) netip.Addr {
	if i.deps.ClientAddr != nil {
		return i.deps.ClientAddr(r)
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (i *Issuer) serveToken(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	addr := i.clientAddr(r)
	if f := i.deps.Failures; f != nil {
		if retry, blocked := f.Blocked(addr); blocked {
			writeError(w, &oauthError{status: http.StatusTooManyRequests, code: "invalid_request", desc: "too many failed authentications from this address; back off and retry", retry: retry})
			return
		}
	}
	resp, err := i.issue(r)
	if err != nil {
		var oe *oauthError
		if !errors.As(err, &oe) {
			i.log.Warn("token request failed", zap.Error(err))
			oe = &oauthError{status: http.StatusServiceUnavailable, code: "temporarily_unavailable", desc: "the key store or signing keys are unavailable; try again shortly", retry: time.Second}
		}
		if oe.code == "invalid_client" && i.deps.Failures != nil {
			if retry, blocked := i.deps.Failures.Fail(r.Context(), addr); blocked {
				oe = &oauthError{status: http.StatusTooManyRequests, code: "invalid_request", desc: "too many failed authentications from this address; back off and retry", retry: retry}
			}
		}
		writeError(w, oe)
		return
	}
	b, _ := json.Marshal(resp)
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, e *oauthError) {
	h := w.Header()
	if e.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Basic realm="keygate"`)
	}
	if e.retry > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((e.retry+time.Second-1)/time.Second), 10))
	}
	b, _ := json.Marshal(struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}{e.code, e.desc})
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// readForm reads the x-www-form-urlencoded body; a parameter sent twice
// is refused (RFC 6749 §3.2).
func readForm(r *http.Request) (url.Values, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, invalidRequest("the request body must be application/x-www-form-urlencoded")
	}
	if r.URL.RawQuery != "" {
		return nil, invalidRequest("parameters belong in the request body, not the URL")
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &oauthError{status: http.StatusRequestEntityTooLarge, code: "invalid_request", desc: "request body too large"}
		}
		return nil, invalidRequest("could not read the request body")
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, invalidRequest("the request body is not a valid form")
	}
	for k, v := range form {
		if len(v) > 1 {
			return nil, invalidRequest("parameter '" + safe(k) + "' is sent more than once")
		}
	}
	return form, nil
}

// safe trims a client-sent name for an error message, to characters
// RFC 6749 §5.2 allows in error_description (no '"' or '\\').
func safe(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, s)
}

// clientCredentials finds the client's id and secret: Basic (the id and
// secret form-encoded, RFC 6749 §2.3.1) or the form, never both.
func clientCredentials(r *http.Request, form url.Values) (id, secret string, err error) {
	_, postSecret := form["client_secret"]
	authz := r.Header.Values("Authorization")
	switch {
	case len(authz) > 1:
		return "", "", invalidRequest("more than one Authorization header")
	case len(authz) == 1 && postSecret:
		return "", "", invalidRequest("use one client authentication method: HTTP Basic or client_secret in the body, not both")
	case len(authz) == 1:
		u, p, ok := r.BasicAuth()
		if !ok {
			return "", "", errInvalidClient
		}
		if id, err = url.QueryUnescape(u); err != nil {
			return "", "", errInvalidClient
		}
		if secret, err = url.QueryUnescape(p); err != nil {
			return "", "", errInvalidClient
		}
		if fid, ok := form["client_id"]; ok && fid[0] != id {
			return "", "", invalidRequest("client_id in the body differs from the HTTP Basic one")
		}
		return id, secret, nil
	case postSecret:
		return form.Get("client_id"), form.Get("client_secret"), nil
	}
	return "", "", errInvalidClient
}

// dummyHash is compared against when a key is unknown, so that a miss
// costs what a hit does.
var dummyHash keystore.Hash

func (i *Issuer) authenticateClient(r *http.Request, id, secret string) (keystore.Record, error) {
	env, perr := keystore.Parse(secret)
	h := keystore.HashKey(secret)
	rec, ok, err := i.deps.Keys.Lookup(r.Context(), h)
	if err != nil {
		return keystore.Record{}, err
	}
	if !ok {
		_ = h.Equal(dummyHash)
		_ = subtle.ConstantTimeCompare([]byte(id), []byte(id))
		return keystore.Record{}, errInvalidClient
	}
	idOK := subtle.ConstantTimeCompare([]byte(rec.ID), []byte(id)) == 1
	if perr != nil || !rec.Hash.Equal(h) || !idOK || rec.Env != env || rec.StateAt(i.now()) != keystore.Active {
		return keystore.Record{}, errInvalidClient
	}
	return rec, nil
}

func (i *Issuer) scopeOf(p keystore.Product) string {
	for _, ps := range i.scopes {
		if ps.product == string(p) {
			return ps.scope
		}
	}
	return ""
}

func (i *Issuer) issue(r *http.Request) (*tokenResponse, error) {
	form, err := readForm(r)
	if err != nil {
		return nil, err
	}
	id, secret, err := clientCredentials(r, form)
	if err != nil {
		return nil, err
	}
	rec, err := i.authenticateClient(r, id, secret)
	if err != nil {
		return nil, err
	}
	switch gt := form.Get("grant_type"); gt {
	case "client_credentials":
	case "":
		return nil, invalidRequest("grant_type is required")
	default:
		return nil, &oauthError{status: http.StatusBadRequest, code: "unsupported_grant_type", desc: "only grant_type=client_credentials is supported"}
	}
	keyScope := i.scopeOf(rec.Product)
	if keyScope == "" {
		return nil, &oauthError{status: http.StatusBadRequest, code: "invalid_scope", desc: "the key's product has no scope"}
	}
	if s, ok := form["scope"]; ok {
		fields := strings.Fields(s[0])
		if len(fields) == 0 {
			return nil, &oauthError{status: http.StatusBadRequest, code: "invalid_scope", desc: "scope is empty"}
		}
		for _, f := range fields {
			if f != keyScope {
				return nil, &oauthError{status: http.StatusBadRequest, code: "invalid_scope", desc: "the requested scope is outside the key's product scope (" + keyScope + ")"}
			}
		}
	}
	if l := i.deps.Limiter; l != nil {
		d, err := l.Allow(r.Context(), "token-issue:"+rec.ID, IssueLimit)
		if err != nil {
			return nil, err
		}
		if !d.Allowed {
			return nil, &oauthError{status: http.StatusTooManyRequests, code: "invalid_request", desc: "too many token requests for this client; reuse a token until it nearly expires", retry: max(d.RetryAfter, time.Second)}
		}
	}
	tok, err := i.mint(rec, keyScope)
	if err != nil {
		return nil, err
	}
	if err := i.remember(r, rec); err != nil {
		return nil, err
	}
	return &tokenResponse{AccessToken: tok, TokenType: "Bearer", ExpiresIn: int64(i.cfg.TTL / time.Second), Scope: keyScope}, nil
}

// remember stores which key hash the key id stands for, so that every
// replica can find the key of a token.
func (i *Issuer) remember(r *http.Request, rec keystore.Record) error {
	if h, ok := i.refs.Get(rec.ID); ok && h == rec.Hash {
		return nil
	}
	if err := i.deps.Store.PutRef(r.Context(), rec.ID, rec.Hash.String()); err != nil {
		return err
	}
	i.refs.Add(rec.ID, rec.Hash)
	return nil
}

func (i *Issuer) mint(rec keystore.Record, scope string) (string, error) {
	ks := i.keys.Load()
	now := i.now().Truncate(time.Second)
	b := jwt.NewBuilder().
		Issuer(i.cfg.Issuer).
		Subject(rec.ID).
		Audience([]string{i.cfg.audience()}).
		IssuedAt(now).
		NotBefore(now).
		Expiration(now.Add(i.cfg.TTL)).
		JwtID(newJTI()).
		Claim("client_id", rec.ID).
		Claim("scope", scope).
		Claim("env", string(rec.Env))
	if c := i.deps.ContextClaim; c != "" && rec.Context != "" {
		b = b.Claim(c, rec.Context)
	}
	t, err := b.Build()
	if err != nil {
		return "", err
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.TypeKey, "at+jwt"); err != nil {
		return "", err
	}
	signed, err := jwt.Sign(t, jwt.WithKey(ks.signer.alg, ks.signer.priv, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", err
	}
	// ECDSA signs with either s or n−s at random; the verifier accepts
	// only the low one, so that a token has one spelling.
	return jwscheck.LowS(ks.signer.alg.String(), string(signed))
}
