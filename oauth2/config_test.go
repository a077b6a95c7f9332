package oauth2_test

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/oauth2"
)

const exampleYAML = `
auth:
  oauth2:
    enabled: true
    issuer: https://issuer.example/
    jwks_url: https://issuer.example/.well-known/jwks.json
    audiences: [keygate]
    algorithms: [RS256, ES256]
    product_scopes: { extraction: "extraction:sync", registry: "registry" }
    context_claim: context
    env_claim: ""
    leeway: 30s
    jwks_refresh_min_interval: 30s
    ca_root: ""
`

func TestConfigYAML(t *testing.T) {
	t.Parallel()
	var doc struct {
		Auth struct {
			OAuth2 oauth2.Config `yaml:"oauth2"`
		} `yaml:"auth"`
	}
	if err := yaml.Unmarshal([]byte(exampleYAML), &doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Auth.OAuth2
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := oauth2.DefaultConfig()
	want.Enabled = true
	want.Issuer = "https://issuer.example/"
	want.JWKSURL = "https://issuer.example/.well-known/jwks.json"
	if c.Issuer != want.Issuer || c.JWKSURL != want.JWKSURL || c.Leeway != 30*time.Second ||
		c.JWKSRefreshMinInterval != want.JWKSRefreshMinInterval || c.ContextClaim != "context" ||
		c.ProductScopes["extraction"] != "extraction:sync" || c.ProductScopes["registry"] != "registry" ||
		len(c.Algorithms) != 2 || len(c.Audiences) != 1 {
		t.Fatalf("decoded %+v", c)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := func() oauth2.Config {
		c := oauth2.DefaultConfig()
		c.Enabled = true
		c.Issuer = "https://issuer.example/"
		c.JWKSURL = "https://issuer.example/jwks.json"
		return c
	}
	tests := []struct {
		name string
		mod  func(*oauth2.Config)
		want string // substring of the error; empty means valid
	}{
		{"defaults are valid while disabled", func(c *oauth2.Config) { *c = oauth2.DefaultConfig() }, ""},
		{"zero value is valid while disabled", func(c *oauth2.Config) { *c = oauth2.Config{} }, ""},
		{"enabled with issuer and jwks", func(*oauth2.Config) {}, ""},
		{"all asymmetric algorithms", func(c *oauth2.Config) {
			c.Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
		}, ""},
		{"jwks_url missing", func(c *oauth2.Config) { c.JWKSURL = "" }, "jwks_url: required when auth.oauth2.enabled"},
		{"jwks_url over http", func(c *oauth2.Config) { c.JWKSURL = "http://issuer.example/jwks" }, "jwks_url: must be an https URL"},
		{"issuer missing", func(c *oauth2.Config) { c.Issuer = " " }, "issuer: required"},
		{"no audience", func(c *oauth2.Config) { c.Audiences = nil }, "audiences: at least one"},
		{"empty audience", func(c *oauth2.Config) { c.Audiences = []string{"a", ""} }, "audiences[1]: must not be empty"},
		{"no algorithms", func(c *oauth2.Config) { c.Algorithms = nil }, "algorithms: at least one"},
		{"alg none", func(c *oauth2.Config) { c.Algorithms = []string{"none"} }, `algorithms[0]: "none" is not allowed`},
		{"HS256", func(c *oauth2.Config) { c.Algorithms = []string{"RS256", "HS256"} }, `algorithms[1]: "HS256" is not allowed`},
		{"HS256 even when disabled", func(c *oauth2.Config) { c.Enabled = false; c.Algorithms = []string{"HS256"} }, `algorithms[0]`},
		{"no product scopes", func(c *oauth2.Config) { c.ProductScopes = nil }, "product_scopes: at least one"},
		{"unknown product", func(c *oauth2.Config) { c.ProductScopes = map[string]string{"extration": "x"} }, "product_scopes.extration: unknown product"},
		{"scope with a space", func(c *oauth2.Config) { c.ProductScopes = map[string]string{"registry": "a b"} }, "product_scopes.registry: must be a single scope token"},
		{"negative leeway", func(c *oauth2.Config) { c.Leeway = -time.Second }, "leeway: must be between"},
		{"negative refresh interval", func(c *oauth2.Config) { c.JWKSRefreshMinInterval = -time.Second }, "jwks_refresh_min_interval: must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := good()
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
