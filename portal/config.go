package portal

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is the portal section of the configuration.
type Config struct {
	// Enabled turns the portal on. It is off by default; `make run`
	// (keygate demo) turns it on.
	Enabled bool `yaml:"enabled"`
	// Listen is the portal's own listener, default :8444. It is HTTPS
	// with the gateway's TLS settings (plain HTTP only when tls.mode is
	// off, behind a TLS-terminating load balancer), and never the API
	// listener.
	Listen string `yaml:"listen"`
	// PublicURL is the portal's address as browsers reach it, such as
	// https://portal.example.com; the one-time URLs of delegated sessions
	// start with it. Default https://localhost:<port of listen>.
	PublicURL string `yaml:"public_url"`
	// APIURL is the API's address as clients reach it, such as
	// https://api.example.com, for the examples the portal shows; "" shows
	// a placeholder.
	APIURL string `yaml:"api_url"`
	// OIDC signs users in through the operator's identity provider; off
	// when issuer is empty.
	OIDC OIDCConfig `yaml:"oidc"`
	// ConsumerClaim is the ID-token claim that names the signed-in user's
	// consumer (default "sub"). Its value (or, for a list claim, each
	// value) is matched to a consumer's id, then, when
	// ConsumerMetadataKey is set, to that metadata entry of a consumer.
	ConsumerClaim string `yaml:"consumer_claim"`
	// ConsumerMetadataKey names the consumer metadata entry matched
	// against the claim, such as "oidc_org". Empty: ids only.
	ConsumerMetadataKey string `yaml:"consumer_metadata_key"`
	// Session bounds a signed-in session.
	Session SessionConfig `yaml:"session"`
	// LimitRequestWebhook, when set, receives each "request a higher
	// limit" form as a JSON POST (https, or http to a loopback address).
	LimitRequestWebhook string `yaml:"limit_request_webhook"`
	// RotationGraces are the grace periods a rotation may choose (how
	// long the old key keeps working); default 0 (at once), 1h, 24h and
	// 168h. The second is preselected.
	RotationGraces []time.Duration `yaml:"rotation_graces"`
	// RateLimit bounds portal requests per session and per client
	// address.
	RateLimit RateLimitConfig `yaml:"rate_limit"`
}

// OIDCConfig is the identity provider (authorization code flow with
// PKCE).
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; discovery is read from its
	// /.well-known/openid-configuration.
	Issuer string `yaml:"issuer"`
	// ClientID is the portal's client at the provider.
	ClientID string `yaml:"client_id"`
	// ClientSecretEnv names the environment variable that holds the
	// client secret; empty for a public client (PKCE only).
	ClientSecretEnv string `yaml:"client_secret_env"`
	// RedirectURL is the callback registered at the provider; default
	// PublicURL + /callback.
	RedirectURL string `yaml:"redirect_url"`
	// Scopes asked for; "openid" is always added. Default openid,
	// profile, email.
	Scopes []string `yaml:"scopes"`
	// Name is shown on the sign-in button; default "your identity
	// provider".
	Name string `yaml:"name"`
	// CAFile is a PEM file of CAs trusted for the provider besides the
	// system's (a provider behind a private CA); "" for the system's.
	CAFile string `yaml:"ca_file"`
}

// SessionConfig bounds a session. Sessions are kept server-side: in
// process, or in Redis when the keystore is Redis (so every replica
// honours them).
type SessionConfig struct {
	// MaxAge is the absolute lifetime of a session; default 12h.
	MaxAge time.Duration `yaml:"max_age"`
	// IdleTimeout ends a session unused this long; default 30m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// RateLimitConfig is the portal's request limit: a token bucket per
// session and one per client address, each per replica.
type RateLimitConfig struct {
	// PerSession is requests per second a session may make, with Burst.
	PerSession float64 `yaml:"per_session"`
	// PerAddress is requests per second one client address may make,
	// signed in or not, with Burst.
	PerAddress float64 `yaml:"per_address"`
	Burst      int     `yaml:"burst"`
}

// DefaultConfig is the portal section when the file says nothing.
func DefaultConfig() Config {
	return Config{
		Listen:         ":8444",
		ConsumerClaim:  "sub",
		OIDC:           OIDCConfig{Scopes: []string{"openid", "profile", "email"}},
		Session:        SessionConfig{MaxAge: 12 * time.Hour, IdleTimeout: 30 * time.Minute},
		RateLimit:      RateLimitConfig{PerSession: 10, PerAddress: 20, Burst: 40},
		RotationGraces: []time.Duration{0, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour},
	}
}

// Validate checks the section, whether or not the portal is enabled;
// messages name the field within the section. It returns the first
// problem.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %q is not host:port", c.Listen)
	}
	if c.PublicURL != "" {
		if err := absURL(c.PublicURL); err != nil {
			return fmt.Errorf("public_url: %w", err)
		}
	}
	if c.APIURL != "" {
		if err := absURL(c.APIURL); err != nil {
			return fmt.Errorf("api_url: %w", err)
		}
	}
	if o := c.OIDC; o.Issuer != "" {
		if err := absURL(o.Issuer); err != nil {
			return fmt.Errorf("oidc.issuer: %w", err)
		}
		if o.ClientID == "" {
			return errors.New("oidc.client_id: required with oidc.issuer")
		}
		if o.RedirectURL != "" {
			if err := absURL(o.RedirectURL); err != nil {
				return fmt.Errorf("oidc.redirect_url: %w", err)
			}
		}
	}
	if c.ConsumerClaim == "" {
		return errors.New("consumer_claim: must not be empty")
	}
	if c.Session.MaxAge <= 0 || c.Session.IdleTimeout <= 0 {
		return errors.New("session: max_age and idle_timeout must be positive")
	}
	if c.Session.IdleTimeout > c.Session.MaxAge {
		return errors.New("session.idle_timeout: must not exceed session.max_age")
	}
	if c.RateLimit.PerSession <= 0 || c.RateLimit.PerAddress <= 0 || c.RateLimit.Burst < 1 {
		return errors.New("rate_limit: per_session and per_address must be positive and burst at least 1")
	}
	if len(c.RotationGraces) == 0 {
		return errors.New("rotation_graces: list at least one grace period")
	}
	for _, g := range c.RotationGraces {
		if g < 0 || g > 90*24*time.Hour {
			return fmt.Errorf("rotation_graces: %s is not between 0 and 90 days", g)
		}
	}
	if w := c.LimitRequestWebhook; w != "" {
		u, err := url.Parse(w)
		if err != nil || u.Host == "" {
			return fmt.Errorf("limit_request_webhook: %q is not an absolute URL", w)
		}
		if u.Scheme != "https" && (u.Scheme != "http" || !loopbackHost(u.Hostname())) {
			return errors.New("limit_request_webhook: must be https (http only to a loopback address)")
		}
	}
	return nil
}

func absURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("%q is not an absolute http(s) URL", s)
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return fmt.Errorf("%q must be https (http only on a loopback address)", s)
	}
	return nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// URL is the portal's public base URL: PublicURL, or
// https://localhost:<port> from Listen.
func (c Config) URL() string { return c.publicURL() }

// publicURL is PublicURL, or https://localhost:<port> from Listen.
func (c Config) publicURL() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	_, port, _ := net.SplitHostPort(c.Listen)
	return "https://localhost:" + port
}
