// Package oauth2test is a test OAuth 2.0 issuer for keygate's tests:
// signing keys, a JWKS served over loopback TLS that counts its fetches and
// can be taken down, and token minting (signed, or unsigned with alg none).
// It is the bearer-token counterpart of tlsconf/pebbletest.
package oauth2test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// Signer is a private key the test issuer signs with.
type Signer struct {
	Alg jwa.SignatureAlgorithm
	Key jwk.Key // private, with its kid
	Raw crypto.Signer
}

// NewRSA returns an RS256 signer over a fresh 2048-bit key named kid.
func NewRSA(tb testing.TB, kid string) Signer {
	tb.Helper()
	raw, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	return Import(tb, raw, kid, jwa.RS256())
}

// RSA returns an RS256 signer named kid over the i-th of a set of RSA
// keys made once per test binary and shared (a 2048-bit key takes long
// to make under -race). Different i, different keys.
func RSA(tb testing.TB, i int, kid string) Signer {
	tb.Helper()
	return Import(tb, cached(&rsaKeys, i, func() (crypto.Signer, error) { return rsa.GenerateKey(rand.Reader, 2048) }), kid, jwa.RS256())
}

// EC is RSA for ES256 over P-256 keys.
func EC(tb testing.TB, i int, kid string) Signer {
	tb.Helper()
	return Import(tb, cached(&ecKeys, i, func() (crypto.Signer, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }), kid, jwa.ES256())
}

// keyCache holds the shared keys by index.
type keyCache struct {
	mu   sync.Mutex
	keys []crypto.Signer
}

var rsaKeys, ecKeys keyCache

func cached(c *keyCache, i int, make func() (crypto.Signer, error)) crypto.Signer {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.keys) <= i {
		k, err := make()
		if err != nil {
			panic(err) // crypto/rand does not fail
		}
		c.keys = append(c.keys, k)
	}
	return c.keys[i]
}

// NewEC returns an ES256 signer over a fresh P-256 key named kid.
func NewEC(tb testing.TB, kid string) Signer {
	tb.Helper()
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return Import(tb, raw, kid, jwa.ES256())
}

// Import wraps an existing key (for tests that reuse keys, which are slow
// to make under -race).
func Import(tb testing.TB, raw crypto.Signer, kid string, alg jwa.SignatureAlgorithm) Signer {
	tb.Helper()
	k, err := jwk.Import(raw)
	if err != nil {
		tb.Fatal(err)
	}
	if err := k.Set(jwk.KeyIDKey, kid); err != nil {
		tb.Fatal(err)
	}
	return Signer{Alg: alg, Key: k, Raw: raw}
}

// Mint signs claims with s.
func Mint(tb testing.TB, s Signer, claims map[string]any) string {
	tb.Helper()
	tok := jwt.New()
	for k, v := range claims {
		if err := tok.Set(k, v); err != nil {
			tb.Fatal(err)
		}
	}
	b, err := jwt.Sign(tok, jwt.WithKey(s.Alg, s.Key))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// Unsigned returns a token with alg none over claims, as an attacker
// would send it.
func Unsigned(claims map[string]any, kid string) string {
	return b64json(map[string]string{"alg": "none", "typ": "JWT", "kid": kid}) + "." + b64json(unixTimes(claims)) + "."
}

// Tamper replaces the payload of token with claims, keeping its header and
// signature, as an attacker editing a stolen token would.
func Tamper(token string, claims map[string]any) string {
	parts := strings.SplitN(token, ".", 3)
	if len(parts) != 3 {
		return token
	}
	return parts[0] + "." + b64json(unixTimes(claims)) + "." + parts[2]
}

func unixTimes(claims map[string]any) map[string]any {
	cc := map[string]any{}
	for k, v := range claims {
		if tm, ok := v.(time.Time); ok {
			v = tm.Unix()
		}
		cc[k] = v
	}
	return cc
}

func b64json(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Issuer serves the public keys of its signers as a JWKS over loopback TLS
// (httptest's certificate). It is safe for concurrent use.
type Issuer struct {
	// Server is the JWKS endpoint; Server.Client() trusts it.
	Server *httptest.Server
	// Fetches counts JWKS requests.
	Fetches atomic.Int64
	// Down makes the endpoint answer 503 while true.
	Down atomic.Bool

	mu   sync.Mutex
	keys []jwk.Key // public
}

// NewIssuer starts an issuer publishing signers; it stops with the test.
func NewIssuer(tb testing.TB, signers ...Signer) *Issuer {
	tb.Helper()
	is := &Issuer{}
	for _, s := range signers {
		is.Publish(tb, s)
	}
	is.Server = httptest.NewTLSServer(http.HandlerFunc(is.serve))
	tb.Cleanup(is.Server.Close)
	return is
}

// Publish adds s's public key to the JWKS (a key rotation).
func (is *Issuer) Publish(tb testing.TB, s Signer) {
	tb.Helper()
	pub, err := s.Key.PublicKey()
	if err != nil {
		tb.Fatal(err)
	}
	is.mu.Lock()
	is.keys = append(is.keys, pub)
	is.mu.Unlock()
}

// Withdraw removes the key kid from the JWKS (a key the issuer no longer
// trusts).
func (is *Issuer) Withdraw(kid string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys = slices.DeleteFunc(is.keys, func(k jwk.Key) bool {
		id, _ := k.KeyID()
		return id == kid
	})
}

func (is *Issuer) serve(w http.ResponseWriter, _ *http.Request) {
	is.Fetches.Add(1)
	if is.Down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	set := jwk.NewSet()
	is.mu.Lock()
	for _, k := range is.keys {
		_ = set.AddKey(k)
	}
	is.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// JWKSURL is the key set's address.
func (is *Issuer) JWKSURL() string { return is.Server.URL + "/.well-known/jwks.json" }

// CAPEM is the PEM of the certificate the endpoint serves (its own CA),
// for auth.oauth2.ca_root.
func (is *Issuer) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: is.Server.Certificate().Raw})
}
