// Package tokenissuer is keygate's own OAuth 2.0 authorization server for
// key holders: the client_credentials grant (RFC 6749 §4.4) at
// POST /oauth2/token, where a key's id and the key itself buy a
// short-lived RFC 9068 access token; the RFC 8414 metadata and the RFC 7517
// JWKS that describe it; the signing keys behind it, stored in the keystore
// backend and rotated; and the local validation of its tokens, which ties
// each token's life to the key that bought it (the key is looked up in the
// keystore on every use).
package tokenissuer

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Config is the YAML section auth.token_endpoint.
type Config struct {
	// Enabled turns the token endpoint, its metadata and JWKS, and the
	// validation of its tokens on.
	Enabled bool `yaml:"enabled"`
	// Issuer is the gateway's public https URL: the tokens' iss, and the
	// base of the metadata's endpoint URLs.
	Issuer string `yaml:"issuer"`
	// Audience is the tokens' aud; empty means the issuer.
	Audience string `yaml:"audience"`
	// TTL is a token's lifetime (at most 1h).
	TTL time.Duration `yaml:"ttl"`
	// Algorithm signs the tokens: ES256 or EdDSA.
	Algorithm string `yaml:"algorithm"`
	// Rotation is how long a signing key signs before a new one replaces
	// it.
	Rotation time.Duration `yaml:"rotation"`
}

// MaxTTL is the longest token lifetime Config.TTL may ask for.
const MaxTTL = time.Hour

// DefaultConfig returns the documented defaults (disabled).
func DefaultConfig() Config {
	return Config{TTL: 10 * time.Minute, Algorithm: "ES256", Rotation: 720 * time.Hour}
}

// Validate checks the section, naming fields within it.
func (c Config) Validate() error {
	if c.TTL < time.Minute || c.TTL > MaxTTL {
		return fmt.Errorf("ttl: must be between 1m and 1h, got %s", c.TTL)
	}
	if c.Algorithm != "ES256" && c.Algorithm != "EdDSA" {
		return fmt.Errorf("algorithm: must be ES256 or EdDSA, got %q", c.Algorithm)
	}
	if c.Rotation < 2*c.TTL {
		return fmt.Errorf("rotation: must be at least twice the ttl (%s), got %s", 2*c.TTL, c.Rotation)
	}
	if !c.Enabled {
		return nil
	}
	u, err := url.Parse(c.Issuer)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("issuer: must be an https URL without query or fragment, got %q", c.Issuer)
	}
	if strings.TrimSpace(c.Audience) != c.Audience {
		return fmt.Errorf("audience: must not have surrounding spaces")
	}
	return nil
}

func (c Config) audience() string {
	if c.Audience == "" {
		return c.Issuer
	}
	return c.Audience
}

// endpoint is an absolute URL under the issuer.
func (c Config) endpoint(path string) string {
	return strings.TrimSuffix(c.Issuer, "/") + path
}
