package secretscan_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/secretscan"
)

func TestFileConfigValidate(t *testing.T) {
	if err := secretscan.DefaultFileConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		set  func(*secretscan.FileConfig)
		want string
	}{
		{"enabled without keys", func(c *secretscan.FileConfig) { c.Enabled = true }, "exactly one"},
		{"both keys", func(c *secretscan.FileConfig) { c.Enabled, c.KeysFile, c.KeysURL = true, "k.json", "https://x" }, "exactly one"},
		{"bad keys url", func(c *secretscan.FileConfig) { c.Enabled, c.KeysURL = true, "ftp://x" }, "keys_url"},
		{"bad policy", func(c *secretscan.FileConfig) { c.Policy.Test = "delete" }, "policy.test"},
		{"zero grace", func(c *secretscan.FileConfig) { c.QuarantineGrace = 0 }, "quarantine_grace"},
		{"tiny body", func(c *secretscan.FileConfig) { c.MaxBodyBytes = 10 }, "max_body_bytes"},
		{"no matches", func(c *secretscan.FileConfig) { c.MaxMatches = 0 }, "max_matches"},
		{"webhook without secret", func(c *secretscan.FileConfig) { c.Webhook.URL = "https://hooks.example" }, "webhook.secret_env"},
		{"fast refresh", func(c *secretscan.FileConfig) { c.KeysRefresh = time.Millisecond }, "keys_refresh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := secretscan.DefaultFileConfig()
			tc.set(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
}
