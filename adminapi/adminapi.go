// Package adminapi is keygate's admin REST API: consumers, keys (issue,
// list, show, update, rotate, revoke), key usage and the audit log, under
// /v1 on a listener of its own (admin_api.listen), with the OpenAPI 3.1
// document it serves at /v1/openapi.json.
//
// Every change goes through package keyops, the one implementation the
// CLI uses too, with the caller as the keyops.Actor, so the audit log
// records who made it and from where. Callers authenticate with an admin
// token (Authorization: Bearer kga_…, checked by a TokenAuthenticator) or
// with a client certificate from admin_api.client_ca_file, whose subject
// CN admin_api.client_cert_scopes maps to scopes. There is no anonymous
// access: a missing or wrong credential is 401, a missing scope 403.
// Errors are RFC 9457 application/problem+json.
package adminapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/internal/capool"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// Scopes an admin token or a client certificate may hold.
const (
	ScopeKeysRead       = "keys:read"
	ScopeKeysWrite      = "keys:write"
	ScopeConsumersRead  = "consumers:read"
	ScopeConsumersWrite = "consumers:write"
	ScopeUsageRead      = "usage:read"
	ScopeAuditRead      = "audit:read"
)

// AllScopes lists every scope, in the order the documentation gives them.
var AllScopes = []string{ScopeKeysRead, ScopeKeysWrite, ScopeConsumersRead, ScopeConsumersWrite, ScopeUsageRead, ScopeAuditRead}

// ValidScope reports whether s is one of AllScopes.
func ValidScope(s string) bool { return slices.Contains(AllScopes, s) }

// TLS modes of Config.TLS.
const (
	TLSOn  = "on"
	TLSOff = "off"
)

// Config is the admin_api section of the configuration.
type Config struct {
	// Enabled turns the admin API on. It is off by default: the API can
	// issue keys, so it listens only where an operator asks it to.
	Enabled bool `yaml:"enabled"`
	// Listen is the admin API's listener; default 127.0.0.1:9091. It must
	// differ from the gateway's listeners.
	Listen string `yaml:"listen"`
	// TLS is "on" (default): HTTPS with the gateway's certificate (the tls
	// section), or "off": plain HTTP, allowed only when Listen is a
	// loopback address.
	TLS string `yaml:"tls"`
	// ClientCAFile, when set, is a PEM file of the CAs whose client
	// certificates authenticate callers (mTLS). Requires TLS on.
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientCertScopes maps a client certificate's subject common name
	// to its scopes. A verified certificate whose CN is not listed is
	// authenticated with no scope (403 everywhere).
	ClientCertScopes map[string][]string `yaml:"client_cert_scopes"`
	// IdempotencyTTL is how long an Idempotency-Key is remembered;
	// default 24h. With the file keystore they are kept in memory, per
	// replica; with the Redis keystore, in Redis.
	IdempotencyTTL time.Duration `yaml:"idempotency_ttl"`
	// IdempotencyMaxEntries caps the Idempotency-Keys remembered in
	// memory; the oldest go first. Default 10000. With the Redis
	// keystore they are kept in Redis, shared by the replicas, and
	// expire by themselves.
	IdempotencyMaxEntries int `yaml:"idempotency_max_entries"`
}

// DefaultConfig is the admin_api section when the file says nothing.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:9091", TLS: TLSOn, IdempotencyTTL: 24 * time.Hour, IdempotencyMaxEntries: 10000}
}

// Validate checks the section; messages name the field. It is checked
// whether or not the API is enabled, so that turning it on cannot
// reveal an old mistake.
func (c Config) Validate() error {
	if c.Listen == "" {
		return errors.New("listen: required")
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	switch c.TLS {
	case TLSOn:
	case TLSOff:
		if !isLoopback(host) {
			return fmt.Errorf("tls: off is allowed only on a loopback listener (127.0.0.1, [::1] or localhost), but listen is %q", c.Listen)
		}
		if c.ClientCAFile != "" {
			return errors.New("client_ca_file: client certificates need tls: on")
		}
	default:
		return fmt.Errorf("tls: must be on or off, got %q", c.TLS)
	}
	if len(c.ClientCertScopes) > 0 && c.ClientCAFile == "" {
		return errors.New("client_cert_scopes: set client_ca_file, the CA that issues those certificates")
	}
	for cn, scopes := range c.ClientCertScopes {
		if cn == "" {
			return errors.New("client_cert_scopes: a common name must not be empty")
		}
		for i, s := range scopes {
			if !ValidScope(s) {
				return fmt.Errorf("client_cert_scopes.%s[%d]: must be one of %s, got %q", cn, i, strings.Join(AllScopes, ", "), s)
			}
		}
	}
	if c.IdempotencyTTL <= 0 {
		return fmt.Errorf("idempotency_ttl: must be positive, got %s", c.IdempotencyTTL)
	}
	if c.IdempotencyMaxEntries < 1 {
		return fmt.Errorf("idempotency_max_entries: must be at least 1, got %d", c.IdempotencyMaxEntries)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Ops is what the API needs of package keyops; *keyops.Service fits.
type Ops interface {
	IssueKey(ctx context.Context, a keyops.Actor, req keystore.IssueRequest) (string, keystore.Record, error)
	ListKeys(ctx context.Context, f keyops.KeyFilter) ([]keystore.Record, error)
	ListKeysPage(ctx context.Context, f keyops.KeyFilter, after *keystore.Position, limit int) (keyops.KeyPage, error)
	GetKey(ctx context.Context, id string) (keystore.Record, error)
	ShowKey(ctx context.Context, id string) (keyops.KeyDetail, error)
	DescribeKey(ctx context.Context, rec keystore.Record) (keyops.KeyDetail, error)
	UpdateKey(ctx context.Context, a keyops.Actor, id string, u keyops.KeyUpdate) (keystore.Record, error)
	RevokeKey(ctx context.Context, a keyops.Actor, id string) (keystore.Record, error)
	PurgeKeys(ctx context.Context, a keyops.Actor, req keyops.PurgeRequest, each func([]keystore.Record) error) (more bool, err error)
	RotateKey(ctx context.Context, a keyops.Actor, id string, grace time.Duration) (string, keystore.Record, error)
	CreateConsumer(ctx context.Context, a keyops.Actor, spec keyops.ConsumerSpec) (keystore.Consumer, error)
	ListConsumersPage(ctx context.Context, after *keystore.Position, limit int) (keyops.ConsumerPage, error)
	ShowConsumer(ctx context.Context, id string) (keyops.ConsumerDetail, error)
	UpdateConsumer(ctx context.Context, a keyops.Actor, id string, u keyops.ConsumerUpdate) (keystore.Consumer, error)
	DeleteConsumer(ctx context.Context, a keyops.Actor, id string) (keystore.Consumer, error)
}

var _ Ops = (*keyops.Service)(nil)

// PortalSessions makes one-time sign-in links to the self-service portal
// (package portal's SessionLink). The link is valid for 15 minutes and
// works once; an unknown consumer is keystore.ErrConsumerNotFound.
type PortalSessions interface {
	SessionLink(ctx context.Context, by keyops.Actor, consumer, subject string) (url string, expires time.Time, err error)
}

// Principal is an authenticated caller.
type Principal struct {
	// ID names the caller in the audit log: an admin token's id, or
	// "cert:" and a client certificate's subject.
	ID string
	// Scopes are what it may do.
	Scopes []string
}

// Has reports whether p holds scope.
func (p Principal) Has(scope string) bool { return slices.Contains(p.Scopes, scope) }

// TokenAuthenticator checks an admin token (the bearer credential,
// "kga_…"). ok=false means the token is unknown, revoked, expired or
// malformed (401); err means the store failed (503). It must be safe for
// concurrent use and should take as long for an unknown token as for a
// known one.
type TokenAuthenticator interface {
	Authenticate(ctx context.Context, token string) (p Principal, ok bool, err error)
}

// UsageReader reads a key's usage counters. The result is written as the
// JSON body of GET /v1/keys/{id}/usage. since is the window asked for
// (?since=24h); 0 means everything kept. An error wrapping
// keyops.ErrInvalid is a 400.
type UsageReader interface {
	KeyUsage(ctx context.Context, keyID string, since time.Duration) (any, error)
}

// MigrationReader is a UsageReader that also reports who has moved from
// API keys to tokens (GET /v1/migration); since is at most 30 days, and
// consumer, when set, narrows the report to that consumer. An error
// wrapping keyops.ErrInvalid is a 400, keystore.ErrConsumerNotFound a
// 404.
type MigrationReader interface {
	Migration(ctx context.Context, since time.Duration, consumer string) (any, error)
}

// AuditQuery selects audit events, newest first.
type AuditQuery struct {
	// Since, when not zero, leaves out older events.
	Since time.Time
	// Target and Actor, when set, select events with that value.
	Target, Actor string
	// Limit is the page size (1 to 1000).
	Limit int
	// Cursor is the reader's own next_cursor of the previous page; "" for
	// the first page.
	Cursor string
}

// AuditPage is one page of audit events.
type AuditPage struct {
	// Items are the events, each written as a JSON object.
	Items any
	// NextCursor is "" on the last page.
	NextCursor string
}

// AuditReader reads the audit log. An error wrapping keyops.ErrInvalid
// (a cursor it did not issue, say) is a 400.
type AuditReader interface {
	ReadAudit(ctx context.Context, q AuditQuery) (AuditPage, error)
}

// Deps are what the API takes besides its configuration.
type Deps struct {
	// Ops manages keys and consumers. Required.
	Ops Ops
	// Tokens checks admin tokens; nil means no token is accepted (only
	// client certificates, if configured).
	Tokens TokenAuthenticator
	// Usage and Audit serve /v1/keys/{id}/usage and /v1/audit-events;
	// nil answers 501.
	Usage UsageReader
	Audit AuditReader
	// Portal makes the one-time portal sign-in links of POST
	// /v1/portal-sessions; nil (the portal is off) answers 501.
	Portal PortalSessions
	// Redis, when set (the Redis keystore), keeps the Idempotency-Key
	// records, shared by every replica, under RedisPrefix; otherwise
	// they are kept in memory, per replica.
	Redis       redis.UniversalClient
	RedisPrefix string
	// Logger logs failures; nil means none.
	Logger *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// API is the admin API's handler and TLS settings. It is safe for
// concurrent use.
type API struct {
	cfg      Config
	deps     Deps
	log      *zap.Logger
	now      func() time.Time
	clientCA *x509.CertPool
	idem     idemStore
	mux      *http.ServeMux
}

// New checks cfg and deps and builds the API. It reads
// cfg.ClientCAFile.
func New(cfg Config, deps Deps) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Ops == nil {
		return nil, errors.New("adminapi: Deps.Ops is required")
	}
	a := &API{cfg: cfg, deps: deps, log: deps.Logger, now: deps.Now}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	if a.now == nil {
		a.now = time.Now
	}
	if cfg.ClientCAFile != "" {
		var err error
		if a.clientCA, err = capool.Load(cfg.ClientCAFile); err != nil {
			return nil, fieldpath.Errorf("client_ca_file", "%w", err)
		}
	}
	if deps.Redis != nil {
		a.idem = &redisIdempotency{client: deps.Redis, prefix: deps.RedisPrefix, ttl: cfg.IdempotencyTTL}
	} else {
		a.idem = newIdempotency(cfg.IdempotencyTTL, cfg.IdempotencyMaxEntries, a.now)
	}
	a.mux = http.NewServeMux()
	// Paths the API serves under another method answer 405 with Allow;
	// any other path 404.
	byPath := http.NewServeMux()
	allow := map[string][]string{}
	for _, rt := range a.routes() {
		a.mux.Handle(rt.Method+" "+rt.Pattern, a.wrap(rt))
		allow[rt.Pattern] = append(allow[rt.Pattern], rt.Method)
	}
	for pattern, methods := range allow {
		allowed := strings.Join(methods, ", ")
		byPath.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allowed)
			writeProblem(w, r, http.StatusMethodNotAllowed, "method-not-allowed", "method not allowed", "this resource allows "+allowed)
		})
	}
	byPath.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, http.StatusNotFound, "not-found", "no such resource", "")
	})
	a.mux.Handle("/", byPath)
	return a, nil
}

// Handler serves the API.
func (a *API) Handler() http.Handler { return a.mux }

// TLSConfig returns base (the gateway's TLS configuration) made for the
// admin listener: with client certificates verified against
// admin_api.client_ca_file when it is set, and HTTP/2 and HTTP/1.1 only
// (no ACME ALPN). It returns nil when admin_api.tls is off. base nil with
// TLS on is an error: the gateway has no certificate (tls.mode off).
func (a *API) TLSConfig(base *tls.Config) (*tls.Config, error) {
	if a.cfg.TLS == TLSOff {
		return nil, nil
	}
	if base == nil {
		return nil, fieldpath.Errorf("tls", "on needs a certificate, but tls.mode is off; set it off (loopback only) or set a tls.mode")
	}
	c := base.Clone()
	c.NextProtos = []string{"h2", "http/1.1"}
	if a.clientCA != nil {
		c.ClientCAs = a.clientCA
		c.ClientAuth = tls.VerifyClientCertIfGiven
		// A per-connection config would drop the client CA: keep it.
		if inner := c.GetConfigForClient; inner != nil {
			c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
				cc, err := inner(h)
				if cc != nil {
					cc = cc.Clone()
					cc.ClientCAs, cc.ClientAuth = a.clientCA, tls.VerifyClientCertIfGiven
				}
				return cc, err
			}
		}
	}
	return c, nil
}
