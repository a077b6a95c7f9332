package secretscan

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// FileConfig is the YAML section secret_scanning.
type FileConfig struct {
	// Enabled answers GitHub's alerts at POST /v1/secret-scanning/github.
	Enabled bool `yaml:"enabled"`
	// KeysFile or KeysURL (exactly one when enabled) hold GitHub's
	// signing keys in its published shape; the URL is GitHub's
	// https://api.github.com/meta/public_keys/secret_scanning.
	KeysFile string `yaml:"keys_file"`
	KeysURL  string `yaml:"keys_url"`
	// KeysRefresh is the least time between two reloads of the keys that
	// an unknown key identifier triggers.
	KeysRefresh time.Duration `yaml:"keys_refresh"`
	// Policy is the action per environment: revoke, quarantine or notify.
	Policy PolicyConfig `yaml:"policy"`
	// QuarantineGrace is how long a quarantined key keeps working.
	QuarantineGrace time.Duration `yaml:"quarantine_grace"`
	// MaxBodyBytes caps an alert's body (413 above).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxMatches caps an alert's matches (413 above).
	MaxMatches int `yaml:"max_matches"`
	// ReplayWindow is how long a body's answer is replayed to a repeat.
	ReplayWindow time.Duration `yaml:"replay_window"`
	// Webhook tells the operator about each leaked key.
	Webhook WebhookFileConfig `yaml:"webhook"`
}

// PolicyConfig is the action per environment.
type PolicyConfig struct {
	Live keyops.LeakAction `yaml:"live"`
	Test keyops.LeakAction `yaml:"test"`
}

// Map is p by environment.
func (p PolicyConfig) Map() map[keystore.Env]keyops.LeakAction {
	return map[keystore.Env]keyops.LeakAction{keystore.Live: p.Live, keystore.Test: p.Test}
}

// WebhookFileConfig is secret_scanning.webhook.
type WebhookFileConfig struct {
	// URL receives a signed JSON notice per leaked key; "" sends none.
	URL string `yaml:"url"`
	// SecretEnv names the environment variable holding the HMAC secret
	// of the Keygate-Signature header (required with a URL).
	SecretEnv string `yaml:"secret_env"`
	// Attempts and Backoff: tries per notice, and the first wait
	// between them (doubling).
	Attempts int           `yaml:"attempts"`
	Backoff  time.Duration `yaml:"backoff"`
}

// DefaultFileConfig is the documented default: disabled; live keys
// revoked, test keys only noticed.
func DefaultFileConfig() FileConfig {
	return FileConfig{
		KeysRefresh:     time.Minute,
		Policy:          PolicyConfig{Live: keyops.LeakRevoke, Test: keyops.LeakNotify},
		QuarantineGrace: 24 * time.Hour,
		MaxBodyBytes:    DefaultMaxBodyBytes,
		MaxMatches:      DefaultMaxMatches,
		ReplayWindow:    DefaultReplayWindow,
		Webhook:         WebhookFileConfig{Attempts: 6, Backoff: time.Second},
	}
}

// Validate checks c; errors name the field within the section.
func (c FileConfig) Validate() error {
	for name, a := range map[string]keyops.LeakAction{"policy.live": c.Policy.Live, "policy.test": c.Policy.Test} {
		if !a.Valid() {
			return fmt.Errorf("%s: must be revoke, quarantine or notify, got %q", name, a)
		}
	}
	switch {
	case c.KeysRefresh < time.Second:
		return errors.New("keys_refresh: must be at least 1s")
	case c.QuarantineGrace <= 0:
		return errors.New("quarantine_grace: must be positive")
	case c.MaxBodyBytes < 1<<10 || c.MaxBodyBytes > 64<<20:
		return fmt.Errorf("max_body_bytes: must be between 1024 and %d, got %d", 64<<20, c.MaxBodyBytes)
	case c.MaxMatches < 1:
		return errors.New("max_matches: must be at least 1")
	case c.ReplayWindow <= 0:
		return errors.New("replay_window: must be positive")
	case c.Webhook.Attempts < 1:
		return errors.New("webhook.attempts: must be at least 1")
	case c.Webhook.Backoff <= 0:
		return errors.New("webhook.backoff: must be positive")
	}
	if c.Webhook.URL != "" {
		if u, err := url.Parse(c.Webhook.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("webhook.url: must be an http(s) URL, got %q", c.Webhook.URL)
		}
		if c.Webhook.SecretEnv == "" {
			return errors.New("webhook.secret_env: required with webhook.url (the notices are signed)")
		}
	}
	if !c.Enabled {
		return nil
	}
	if (c.KeysFile == "") == (c.KeysURL == "") {
		return errors.New("keys_file, keys_url: exactly one is required when enabled")
	}
	if c.KeysURL != "" {
		if u, err := url.Parse(c.KeysURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("keys_url: must be an http(s) URL, got %q", c.KeysURL)
		}
	}
	return nil
}
