package server_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/server"
)

// TestStartupErrorsNameTheFieldOnce: an error server.New returns names the
// offending option by its real YAML path, once, without a package name or
// a second path stuttering after it.
func TestStartupErrorsNameTheFieldOnce(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such-ca.pem")
	cases := []struct {
		name  string
		mod   func(*config.Config)
		field string
	}{
		{"oauth2 ca_root file missing", func(c *config.Config) {
			c.Auth.OAuth2.Enabled = true
			c.Auth.OAuth2.Issuer = testIssuer
			c.Auth.OAuth2.JWKSURL = "https://127.0.0.1:1/jwks"
			c.Auth.OAuth2.CARoot = missing
		}, "auth.oauth2.ca_root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
			cfg.TLS.Mode = "off"
			cfg.Keystore.File = filepath.Join(t.TempDir(), "keys.yaml")
			c.mod(&cfg)
			_, err := server.New(context.Background(), cfg, server.Deps{})
			if err == nil {
				t.Fatal("server.New succeeded")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, c.field+": ") {
				t.Errorf("%q does not start with %s", msg, c.field)
			}
			rest := strings.TrimPrefix(msg, c.field+": ")
			if strings.Contains(rest, c.field) || strings.HasPrefix(rest, "oauth2: ") {
				t.Errorf("%q stutters", msg)
			}
		})
	}
}
