// Package config is keygate's configuration file: the YAML document that
// composes each package's own section, its defaults, and its validation.
// Load checks a file once at start; every error names the offending field
// by its YAML path.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/keygate/keygate/product"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/oauth2"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/redisconn"
	"github.com/keygate/keygate/secretscan"
	"github.com/keygate/keygate/tlsconf"
	"github.com/keygate/keygate/tokenissuer"
	"github.com/keygate/keygate/tracing"
	"github.com/keygate/keygate/usage"
)

// Config is the whole configuration file. Its zero value is not useful:
// start from Default, which is what `keygate serve` runs with when no file
// is given.
type Config struct {
	Server    ServerConfig     `yaml:"server"`
	TLS       tlsconf.Config   `yaml:"tls"`
	Upstreams UpstreamsConfig  `yaml:"upstreams"`
	Keystore  KeystoreConfig   `yaml:"keystore"`
	Redis     redisconn.Config `yaml:"redis"`
	RateLimit ratelimit.Config `yaml:"ratelimit"`
	Auth      AuthConfig       `yaml:"auth"`
	AdminAPI  adminapi.Config  `yaml:"admin_api"`
	Log       LogConfig        `yaml:"log"`
	// Audit is the audit log of changes to keys, consumers and admin
	// tokens; see package audit and AuditConfig.
	Audit audit.Config `yaml:"audit"`
	// Usage is per-key usage counting; see package usage.
	Usage usage.Config `yaml:"usage"`
	// Portal is the self-service portal; see package portal.
	Portal portal.Config `yaml:"portal"`
	// Tracing exports OpenTelemetry spans over OTLP; see package tracing.
	Tracing tracing.Config `yaml:"tracing"`
	// Operations are custom operations (such as registry:delete, DELETE
	// under /registry/) besides the built-in extraction:sync,
	// registry:read and registry:write; keys' and consumers' permissions
	// and plans' features name them. See policy.OperationsConfig.
	Operations policy.OperationsConfig `yaml:"operations"`
	// SecretScanning answers GitHub's secret-scanning alerts: leaked keys
	// are revoked, quarantined or noticed; see package secretscan.
	SecretScanning secretscan.FileConfig `yaml:"secret_scanning"`
}

// ServerConfig is the listeners and their protections.
type ServerConfig struct {
	// Listen is the API listener (HTTPS unless tls.mode is off).
	Listen string `yaml:"listen"`
	// AdminListen serves /healthz, /readyz and /metrics; never the API.
	AdminListen string `yaml:"admin_listen"`
	// HTTPListen, when set, is a plain-HTTP listener that answers ACME
	// http-01 challenges, redirects key-less GETs to HTTPS and refuses any
	// request that carries a credential in clear.
	HTTPListen string `yaml:"http_listen"`
	// MaxBodyBytes caps request bodies; over it the answer is 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// SpoolDir holds the temp files of /sync uploads whose context field
	// comes after a large file; empty means the system temp dir.
	SpoolDir string `yaml:"spool_dir"`
	// SpoolMemoryBytes is how much of such an upload is held in memory
	// before spilling to SpoolDir, beyond the 64 KiB the multipart
	// parser's window holds anyway.
	SpoolMemoryBytes int `yaml:"spool_memory_bytes"`
	// ReadHeaderTimeout bounds how long a client may take to send headers.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds a whole request, body included; 0 means none
	// (uploads may be large and slow).
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a response; 0 means none.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes caps request headers.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// DrainTimeout is how long in-flight requests may take to finish after
	// SIGTERM or SIGINT before the gateway exits anyway.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// BodyIdleTimeout: a request body that brings no byte for this long
	// gets 408 and its upstream request is aborted, so a client trickling
	// its body cannot hold a connection (and an upstream one) forever even
	// with read_timeout 0. 0 means no limit.
	BodyIdleTimeout time.Duration `yaml:"body_idle_timeout"`
	// MinBodyRate: once its grace period has passed, a request body whose
	// average rate since keygate began reading it is below this gets 408
	// and its upstream request is aborted, so a client trickling its body
	// a byte at a time cannot hold a connection (and an upstream one).
	// Written "1KiB/s after 10s" (units B, KB, KiB, MB, MiB), or "off".
	MinBodyRate gateway.MinBodyRate `yaml:"min_body_rate"`
	// TrustedProxies lists the peers (CIDRs or addresses) whose
	// X-Forwarded-For is believed: only for a request from one of them is
	// the client address taken from that header (its right-most hop that
	// is not itself a trusted proxy). Empty: the TCP peer is the client.
	// The client address feeds the access log, the X-Forwarded-For and
	// X-Real-IP sent upstream, and auth.failure_limit.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// KeystoreConfig says where key records live.
type KeystoreConfig struct {
	// Backend is "file" or "redis".
	Backend string `yaml:"backend"`
	// File is the YAML keystore of the file backend.
	File string `yaml:"file"`
	// ResyncInterval is how often the redis backend re-reads every record
	// (in pages), covering a change that was stored but never logged;
	// changes themselves arrive from the change log.
	ResyncInterval time.Duration `yaml:"resync_interval"`
	// WaitReplicas is how many Redis replicas must confirm each change of
	// the redis backend (Redis WAIT) before it is answered; at most as
	// many as are connected to the primary, so a standalone Redis waits
	// for none. 0 turns the wait off. Default 1.
	WaitReplicas int `yaml:"wait_replicas"`
	// WaitTimeout bounds that wait. A change not confirmed in time gets
	// 503: an issued key is revoked again; a revocation stands on the
	// primary and on every replica of keygate that saw it. Default 1s.
	WaitTimeout time.Duration `yaml:"wait_timeout"`
	// OnDataLoss is what the redis backend answers while Redis has lost
	// data (came back empty or replaced, or a re-read would drop most
	// keys): "serve" (the default) serves the last good set; "fail_closed"
	// answers 503 for every key until the store is repaired.
	OnDataLoss string `yaml:"on_data_loss"`
}

// OnDataLoss values.
const (
	OnDataLossServe      = "serve"
	OnDataLossFailClosed = "fail_closed"
)

// AuthConfig chooses the credential methods.
type AuthConfig struct {
	APIKeys APIKeysConfig `yaml:"api_keys"`
	OAuth2  oauth2.Config `yaml:"oauth2"`
	// TokenEndpoint is keygate's own OAuth 2.0 token endpoint: key
	// holders exchange a key for a short-lived access token, which
	// keygate validates itself (see package tokenissuer).
	TokenEndpoint tokenissuer.Config `yaml:"token_endpoint"`
	// FailureLimit throttles source addresses that fail authentication
	// too often (brute force); see ratelimit.FailureLimitConfig.
	FailureLimit ratelimit.FailureLimitConfig `yaml:"failure_limit"`
}

// APIKeysConfig configures x-api-key authentication.
type APIKeysConfig struct {
	// Enabled turns API keys on or off altogether.
	Enabled bool `yaml:"enabled"`
	// Products lists the products that accept API keys.
	Products []string `yaml:"products"`
	// Deprecation, when set, announces the end of API keys on every
	// key-authenticated response.
	Deprecation DeprecationConfig `yaml:"deprecation"`
}

// LogConfig configures the zap logger.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is json or console.
	Format string `yaml:"format"`
}

// Default is the configuration `keygate serve` uses without a file, and
// the base every file is applied to. It matches config.example.yaml.
func Default() Config {
	return Config{
		Server: ServerConfig{
			Listen:            ":8443",
			AdminListen:       "127.0.0.1:9090",
			MaxBodyBytes:      100 << 20,
			SpoolMemoryBytes:  256 << 10,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
			DrainTimeout:      30 * time.Second,
			BodyIdleTimeout:   30 * time.Second,
			MinBodyRate:       gateway.MinBodyRate{BytesPerSecond: 1 << 10, Grace: 10 * time.Second},
		},
		TLS: tlsconf.DefaultConfig(),
		Upstreams: UpstreamsConfig{
			Extraction: UpstreamConfig{Targets: []string{"http://127.0.0.1:9001"}, Timeout: 60 * time.Second, DialTimeout: 2 * time.Second, MaxIdleConnsPerHost: gateway.DefaultMaxIdleConnsPerHost, IdleTimeout: gateway.DefaultIdleTimeout},
			Registry:   UpstreamConfig{Targets: []string{"http://127.0.0.1:9002"}, Timeout: 60 * time.Second, DialTimeout: 2 * time.Second, MaxIdleConnsPerHost: gateway.DefaultMaxIdleConnsPerHost, IdleTimeout: gateway.DefaultIdleTimeout},
		},
		Keystore:  KeystoreConfig{Backend: "file", File: "./data/keys.yaml", ResyncInterval: 10 * time.Minute, WaitReplicas: 1, WaitTimeout: time.Second, OnDataLoss: OnDataLossServe},
		Redis:     redisconn.DefaultConfig(),
		RateLimit: ratelimit.DefaultConfig(),
		Auth: AuthConfig{
			APIKeys:       APIKeysConfig{Enabled: true, Products: product.All()},
			OAuth2:        oauth2.DefaultConfig(),
			TokenEndpoint: tokenissuer.DefaultConfig(),
			FailureLimit:  ratelimit.DefaultFailureLimitConfig(),
		},
		AdminAPI: adminapi.DefaultConfig(),
		Log:      LogConfig{Level: "info", Format: "json"},
		Audit:    audit.DefaultConfig(),
		Usage:    usage.DefaultConfig(),
		Tracing:  tracing.DefaultConfig(),
		Portal:   portal.DefaultConfig(),

		SecretScanning: secretscan.DefaultFileConfig(),
	}
}

// Load reads, parses and validates the file at path on top of Default.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if emptyYAML(b) {
		// A truncated or wrongly mounted file would otherwise run as the
		// defaults; run without --config for those.
		return Config{}, fmt.Errorf("config %s: the file is empty (it holds no YAML document); give a configuration, or omit --config to run with the defaults", path)
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse parses and validates YAML on top of Default. Unknown fields are
// errors, so a misspelt option does not silently fall back to its default.
// An option the file writes replaces its default whole: a map-valued
// option (ratelimit.limits, auth.oauth2.product_scopes) holds exactly the
// entries written, and each entry only the fields written.
func Parse(b []byte) (Config, error) {
	c := Default()
	clearWrittenMaps(&c, b)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		if msgs := overflowingDurations(b); len(msgs) > 0 {
			return Config{}, errors.New(strings.Join(msgs, "; "))
		}
		return Config{}, errors.New(explain(b, err))
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	if err := checkWrittenQuotas(b, c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// within puts the YAML path where a section is mounted in front of the
// section's own error: each package names its fields within its section,
// and only this package knows where the sections sit.
func within(path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s.%w", path, err)
}

// Validate checks every section; the error names the first bad field.
func (c Config) Validate() error {
	if err := c.Server.Validate(); err != nil {
		return err
	}
	if err := within("tls", c.TLS.Validate()); err != nil {
		return err
	}
	if err := within("usage", c.Usage.Validate()); err != nil {
		return err
	}
	if err := within("tracing", c.Tracing.Validate()); err != nil {
		return err
	}
	if c.TLS.Mode == "acme" && c.Server.HTTPListen == "" && slices.Contains(c.TLS.Challenges, "http-01") {
		return errors.New("tls.challenges: http-01 is answered on server.http_listen, which is empty; set server.http_listen (e.g. \":80\") or use only tls-alpn-01")
	}
	if err := within("upstreams", c.Upstreams.Validate()); err != nil {
		return err
	}
	if err := c.Keystore.Validate(); err != nil {
		return err
	}
	if c.Keystore.Backend == "redis" || c.RateLimit.Backend == "redis" || c.TLS.Storage == "redis" {
		if err := within("redis", c.Redis.Validate()); err != nil {
			return err
		}
	}
	if err := within("ratelimit", c.RateLimit.Validate()); err != nil {
		return err
	}
	if err := c.Auth.Validate(); err != nil {
		return err
	}
	if err := c.validateOperations(); err != nil {
		return err
	}
	if err := within("audit", c.Audit.Validate()); err != nil {
		return err
	}
	if c.Audit.File == audit.NoFile && c.Keystore.Backend != "redis" {
		return errors.New("audit.file: none needs keystore.backend redis (its stream is then the only audit log)")
	}
	if err := c.validateAdminAPI(); err != nil {
		return err
	}
	if err := c.validatePortal(); err != nil {
		return err
	}
	if err := within("secret_scanning", c.SecretScanning.Validate()); err != nil {
		return err
	}
	return c.Log.Validate()
}

// validateAdminAPI checks the admin_api section and how it fits the
// listeners and TLS.
func (c Config) validateAdminAPI() error {
	a := c.AdminAPI
	if err := within("admin_api", a.Validate()); err != nil {
		return err
	}
	if !a.Enabled {
		return nil
	}
	if clash(a.Listen, c.Server.Listen) || clash(a.Listen, c.Server.AdminListen) || (c.Server.HTTPListen != "" && clash(a.Listen, c.Server.HTTPListen)) {
		return errors.New("admin_api.listen: must differ from server.listen, server.admin_listen and server.http_listen")
	}
	if a.TLS == adminapi.TLSOn && c.TLS.Mode == tlsconf.ModeOff {
		return errors.New("admin_api.tls: on uses the gateway's certificate, but tls.mode is off; set admin_api.tls: off (loopback only) or a tls.mode")
	}
	return nil
}

// validatePortal checks the portal section and how it fits the other
// listeners.
func (c Config) validatePortal() error {
	p := c.Portal
	if err := within("portal", p.Validate()); err != nil {
		return err
	}
	if !p.Enabled {
		return nil
	}
	if clash(p.Listen, c.Server.Listen) || clash(p.Listen, c.Server.AdminListen) ||
		(c.Server.HTTPListen != "" && clash(p.Listen, c.Server.HTTPListen)) ||
		(c.AdminAPI.Enabled && clash(p.Listen, c.AdminAPI.Listen)) {
		return errors.New("portal.listen: must differ from server.listen, server.admin_listen, server.http_listen and admin_api.listen")
	}
	return nil
}

// Validate checks the server section.
func (s ServerConfig) Validate() error {
	switch {
	case s.Listen == "":
		return errors.New("server.listen: required")
	case s.AdminListen == "":
		return errors.New("server.admin_listen: required (the admin endpoints never share the API listener)")
	case clash(s.AdminListen, s.Listen):
		return errors.New("server.admin_listen: must differ from server.listen")
	case s.HTTPListen != "" && (clash(s.HTTPListen, s.Listen) || clash(s.HTTPListen, s.AdminListen)):
		return errors.New("server.http_listen: must differ from server.listen and server.admin_listen")
	case s.MaxBodyBytes <= 0:
		return fmt.Errorf("server.max_body_bytes: must be positive, got %d", s.MaxBodyBytes)
	case s.SpoolMemoryBytes < 0:
		return fmt.Errorf("server.spool_memory_bytes: must not be negative, got %d", s.SpoolMemoryBytes)
	case s.ReadHeaderTimeout <= 0:
		return errors.New("server.read_header_timeout: must be positive, so slow-header clients cannot hold connections")
	case s.IdleTimeout <= 0:
		return errors.New("server.idle_timeout: must be positive")
	case s.MaxHeaderBytes < 4096:
		return fmt.Errorf("server.max_header_bytes: must be at least 4096, got %d", s.MaxHeaderBytes)
	case s.ReadTimeout < 0 || s.WriteTimeout < 0:
		return errors.New("server.read_timeout, server.write_timeout: must not be negative")
	case s.DrainTimeout <= 0:
		return errors.New("server.drain_timeout: must be positive")
	case s.BodyIdleTimeout < 0:
		return fmt.Errorf("server.body_idle_timeout: must not be negative (0 turns it off), got %s", s.BodyIdleTimeout)
	}
	if _, err := clientip.ParseTrustedProxies("server.trusted_proxies", s.TrustedProxies); err != nil {
		return err
	}
	return nil
}

// clash reports whether two listen addresses are the same fixed address
// (port 0 picks a free port, so it never clashes).
func clash(a, b string) bool {
	if a != b {
		return false
	}
	_, port, err := net.SplitHostPort(a)
	return err != nil || port != "0"
}

// Validate checks the keystore section.
func (k KeystoreConfig) Validate() error {
	switch k.Backend {
	case "file":
		if k.File == "" {
			return errors.New("keystore.file: required when keystore.backend is file")
		}
	case "redis":
		if k.ResyncInterval <= 0 {
			return errors.New("keystore.resync_interval: must be positive")
		}
		if k.WaitReplicas < 0 {
			return fmt.Errorf("keystore.wait_replicas: must not be negative, got %d", k.WaitReplicas)
		}
		if k.WaitReplicas > 0 && k.WaitTimeout <= 0 {
			return errors.New("keystore.wait_timeout: must be positive while keystore.wait_replicas is set")
		}
		if k.OnDataLoss != OnDataLossServe && k.OnDataLoss != OnDataLossFailClosed {
			return fmt.Errorf("keystore.on_data_loss: must be serve or fail_closed, got %q", k.OnDataLoss)
		}
	default:
		return fmt.Errorf("keystore.backend: must be file or redis, got %q", k.Backend)
	}
	return nil
}

// Validate checks the auth section.
func (a AuthConfig) Validate() error {
	for i, p := range a.APIKeys.Products {
		if !product.Valid(p) {
			return fmt.Errorf("auth.api_keys.products[%d]: must be extraction or registry, got %q", i, p)
		}
	}
	if err := within("auth.failure_limit", a.FailureLimit.Validate()); err != nil {
		return err
	}
	if !a.APIKeys.Enabled && !a.OAuth2.Enabled && !a.TokenEndpoint.Enabled {
		return errors.New("auth: enable at least one of auth.api_keys, auth.oauth2 and auth.token_endpoint")
	}
	if d := a.APIKeys.Deprecation; !d.Sunset.IsZero() && !d.Date.IsZero() && d.Sunset.Before(d.Date) {
		return errors.New("auth.api_keys.deprecation.sunset: must not be before auth.api_keys.deprecation.date")
	}
	if err := within("auth.token_endpoint", a.TokenEndpoint.Validate()); err != nil {
		return err
	}
	if a.TokenEndpoint.Enabled && len(a.OAuth2.ProductScopes) == 0 {
		return errors.New("auth.oauth2.product_scopes: the token endpoint needs a scope per product")
	}
	if a.TokenEndpoint.Enabled && a.OAuth2.Enabled && a.TokenEndpoint.Issuer == a.OAuth2.Issuer {
		return errors.New("auth.token_endpoint.issuer: must differ from auth.oauth2.issuer (the two issuers never validate each other's tokens)")
	}
	return within("auth.oauth2", a.OAuth2.Validate())
}

// Validate checks the log section.
func (l LogConfig) Validate() error {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: must be debug, info, warn or error, got %q", l.Level)
	}
	if l.Format != "json" && l.Format != "console" {
		return fmt.Errorf("log.format: must be json or console, got %q", l.Format)
	}
	return nil
}

// OperationTable compiles the operations section with the built-in
// operations; the error names the field (operations.NAME...).
func (c Config) OperationTable() (*policy.Operations, error) {
	return policy.NewOperations(c.Operations)
}

// Resolver is the resolver of keys' limits and permissions: the
// ratelimit section's env defaults and plans, and the operations.
func (c Config) Resolver() (*policy.Resolver, error) {
	ops, err := c.OperationTable()
	if err != nil {
		return nil, err
	}
	r, err := c.RateLimit.Resolver()
	if err != nil {
		return nil, within("ratelimit", err)
	}
	return r.WithOperations(ops), nil
}

// validateOperations checks the operations section, and that every
// plan's features and every operation scope of auth.oauth2.product_scopes
// name an operation.
func (c Config) validateOperations() error {
	ops, err := c.OperationTable()
	if err != nil {
		return err
	}
	plans := make([]string, 0, len(c.RateLimit.Plans))
	for n := range c.RateLimit.Plans {
		plans = append(plans, n)
	}
	slices.Sort(plans)
	for _, n := range plans {
		for i, f := range c.RateLimit.Plans[n].Features {
			if err := ops.Check([]string{f}); err != nil {
				return fmt.Errorf("ratelimit.plans.%s.features[%d]: %w", n, i, err)
			}
		}
	}
	if c.Auth.OAuth2.Enabled {
		names := make([]string, 0, len(c.Auth.OAuth2.ProductScopes))
		for n := range c.Auth.OAuth2.ProductScopes {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if policy.ValidOperationName(n) {
				if err := ops.Check([]string{n}); err != nil {
					return fmt.Errorf("auth.oauth2.product_scopes.%s: %w", n, err)
				}
			}
		}
	}
	return nil
}
