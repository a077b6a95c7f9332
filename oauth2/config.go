package oauth2

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/product"
)

// Config is the YAML section auth.oauth2.
//
// The zero value is disabled; DefaultConfig gives the documented
// defaults. Validate it once at load.
type Config struct {
	// Enabled turns bearer-token authentication on. When false, the
	// auth chain refuses every bearer token (auth.ReasonDisabled) and New
	// is not called.
	Enabled bool `yaml:"enabled"`
	// Issuer is the exact value the tokens' iss claim must carry.
	Issuer string `yaml:"issuer"`
	// JWKSURL is the https URL of the issuer's JSON Web Key Set.
	JWKSURL string `yaml:"jwks_url"`
	// Audiences lists the accepted aud values; a token passes when its aud
	// holds any of them.
	Audiences []string `yaml:"audiences"`
	// Algorithms is the allow-list of JWS algorithms. Only asymmetric ones
	// may be listed (RS*, PS*, ES*, EdDSA); none and HS* are never accepted.
	Algorithms []string `yaml:"algorithms"`
	// ProductScopes maps a product ("extraction", "registry") to the scope
	// that grants every operation of it, or an operation
	// ("registry:read", see policy.Operations) to the scope that grants
	// that operation alone. A token that lacks the scope of the request's
	// operation (and of its product) gets 403.
	ProductScopes map[string]string `yaml:"product_scopes"`
	// ContextClaim names the claim holding the context the token is bound
	// to. Empty means tokens are bound to no context.
	ContextClaim string `yaml:"context_claim"`
	// EnvClaim optionally names a claim holding "live" or "test". When
	// empty, or when a token lacks the claim, the environment is "live".
	EnvClaim string `yaml:"env_claim"`
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration `yaml:"leeway"`
	// MaxTokenLifetime caps a token's lifetime: exp − iat, or exp − now
	// for a token without iat (plus Leeway). A token past it is refused
	// even when its signature holds, so that a token minted for years
	// with a leaked key does not live for years. 0 means no cap.
	MaxTokenLifetime time.Duration `yaml:"max_token_lifetime"`
	// JWKSRefreshMinInterval rate-limits the refreshes of the key set that a
	// token with an unknown kid (or a key set never fetched) triggers: at
	// most one per interval.
	JWKSRefreshMinInterval time.Duration `yaml:"jwks_refresh_min_interval"`
	// CARoot optionally holds the PEM of the CA that signs the JWKS
	// endpoint's certificate, either inline ("-----BEGIN CERTIFICATE-----
	// ...") or as a file path. When set, only that CA is trusted. It is
	// ignored when Deps.HTTPClient is given.
	CARoot string `yaml:"ca_root"`
}

// allowedAlgorithms are the asymmetric JWS algorithms Config.Algorithms may
// name.
var allowedAlgorithms = []string{
	"RS256", "RS384", "RS512",
	"PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512",
	"EdDSA",
}

func isAllowedAlgorithm(name string) bool {
	for _, a := range allowedAlgorithms {
		if a == name {
			return true
		}
	}
	return false
}

// DefaultConfig returns the documented defaults (disabled).
func DefaultConfig() Config {
	return Config{
		Enabled:                false,
		Audiences:              []string{"keygate"},
		Algorithms:             []string{"RS256", "ES256"},
		ProductScopes:          map[string]string{product.Extraction: "extraction:sync", product.Registry: "registry"},
		ContextClaim:           "context",
		Leeway:                 30 * time.Second,
		MaxTokenLifetime:       24 * time.Hour,
		JWKSRefreshMinInterval: 30 * time.Second,
	}
}

// Validate checks the configuration and reports the first problem, naming
// the offending field within the section (package config puts the
// section's path, auth.oauth2, in front). A disabled configuration is
// only checked for values that would be wrong in any case.
func (c Config) Validate() error {
	const p = ""
	var first error
	add := func(format string, args ...any) {
		if first == nil {
			first = fmt.Errorf(format, args...)
		}
	}

	if c.Leeway < 0 || c.Leeway > 10*time.Minute {
		add(p+"leeway: must be between 0s and 10m, got %s", c.Leeway)
	}
	if c.MaxTokenLifetime < 0 {
		add(p+"max_token_lifetime: must not be negative (0 means no cap), got %s", c.MaxTokenLifetime)
	}
	if c.JWKSRefreshMinInterval < 0 {
		add(p+"jwks_refresh_min_interval: must not be negative, got %s", c.JWKSRefreshMinInterval)
	}
	for i, a := range c.Algorithms {
		if !isAllowedAlgorithm(a) {
			add(p+"algorithms[%d]: %q is not allowed (use one of %s)", i, a, strings.Join(allowedAlgorithms, ", "))
		}
	}
	if !c.Enabled {
		return first
	}

	if strings.TrimSpace(c.Issuer) == "" {
		add(p + "issuer: required when auth.oauth2.enabled")
	}
	if c.JWKSURL == "" {
		add(p + "jwks_url: required when auth.oauth2.enabled")
	} else if u, err := url.Parse(c.JWKSURL); err != nil || u.Scheme != "https" || u.Host == "" {
		add(p+"jwks_url: must be an https URL, got %q", c.JWKSURL)
	}
	if len(c.Audiences) == 0 {
		add(p + "audiences: at least one required when auth.oauth2.enabled")
	}
	for i, a := range c.Audiences {
		if strings.TrimSpace(a) == "" {
			add(p+"audiences[%d]: must not be empty", i)
		}
	}
	if len(c.Algorithms) == 0 {
		add(p + "algorithms: at least one required when auth.oauth2.enabled")
	}
	if len(c.ProductScopes) == 0 {
		add(p + "product_scopes: at least one required when auth.oauth2.enabled")
	}
	products := make([]string, 0, len(c.ProductScopes))
	for prod := range c.ProductScopes {
		products = append(products, prod)
	}
	sort.Strings(products)
	for _, prod := range products {
		scope := c.ProductScopes[prod]
		if !product.Valid(prod) && !policy.ValidOperationName(prod) {
			add(p+"product_scopes.%s: unknown product (use extraction or registry) or operation (such as registry:read)", prod)
		}
		if scope == "" || strings.ContainsAny(scope, " \t\r\n\"\\") {
			add(p+"product_scopes.%s: must be a single scope token, got %q", prod, scope)
		}
	}
	return first
}
