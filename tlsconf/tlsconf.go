// Package tlsconf provides the *tls.Config of keygate's API listener for
// every TLS mode (off, self-signed, certificate files reloaded on change,
// ACME through certmagic), the http-01 challenge handler for the plain-HTTP
// listener, and the HSTS header value.
package tlsconf

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Deps are what New needs besides the configuration.
type Deps struct {
	// Logger receives reloads, errors and certmagic's log; nil means none.
	Logger *zap.Logger
	// Redis is the client for tls.storage: redis.
	Redis redis.UniversalClient
	// RedisPrefix prefixes certmagic's Redis keys; default
	// certstore.DefaultPrefix ("keygate:certmagic:").
	RedisPrefix string
	// HTTPPort is the port of the plain-HTTP listener (server.http_listen)
	// that serves http-01 through HTTPChallengeHandler, and TLSPort the
	// port of the API listener that answers tls-alpn-01. certmagic, finding
	// them in use, leaves the challenges to those listeners; 0 means the
	// standard ports 80 and 443.
	HTTPPort, TLSPort int
	// FilePollInterval is how often files mode stats the certificate files
	// in case a file-system event was missed; default 10 s.
	FilePollInterval time.Duration
	// OnReload, if set, is called after each reload attempt in files mode
	// with its outcome (nil when the new pair is now served).
	OnReload func(err error)
}

// Manager serves the certificates of one TLS configuration. Build it with
// New; the zero value is not usable. It is safe for concurrent use.
type Manager struct {
	mode   string
	base   *tls.Config
	hsts   string
	logger *zap.Logger

	cert atomic.Pointer[tls.Certificate] // self_signed and files

	magic       *certmagic.Config // acme
	domains     []string          // acme: tls.domains
	cache       *certmagic.Cache
	issuer      *certmagic.ACMEIssuer
	httpEnabled bool

	cancel    context.CancelFunc
	closeOnce sync.Once
	closers   []func() error
}

// New validates cfg and prepares its certificates: it generates or loads
// the self-signed one, loads the files (an unreadable pair is an error), or
// sets certmagic up and starts managing tls.domains. In acme mode
// certificates already in storage are loaded before New returns, and
// missing ones are obtained in the background (certmagic's ManageAsync), so
// New does not wait for the CA: the listeners can start at once, which the
// http-01 and tls-alpn-01 challenges need. Until a certificate is there,
// handshakes for its name fail. Renewal is certmagic's background
// maintenance; if the CA is down at renewal time the current certificate
// keeps being served and renewal is retried.
func New(ctx context.Context, cfg Config, deps Deps) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := deps.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	m := &Manager{mode: cfg.Mode, logger: logger}
	if cfg.Mode == ModeOff {
		return m, nil
	}
	m.hsts = hstsValue(cfg.HSTS)
	m.base = baseConfig(cfg)

	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	var err error
	switch cfg.Mode {
	case ModeSelfSigned:
		err = m.startSelfSigned(cfg)
	case ModeFiles:
		err = m.startFiles(cfg, deps)
	case ModeACME:
		err = m.startACME(ctx, bg, cfg, deps)
	}
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

// TLSConfig returns a new copy of the listener's TLS configuration, or nil
// when tls.mode is off.
func (m *Manager) TLSConfig() *tls.Config {
	if m.base == nil {
		return nil
	}
	return m.base.Clone()
}

// HTTPChallengeHandler serves ACME http-01 challenges on the plain-HTTP
// listener and passes every other request to next. Outside acme mode, or
// with http-01 disabled, it returns next itself.
func (m *Manager) HTTPChallengeHandler(next http.Handler) http.Handler {
	if m.issuer == nil || !m.httpEnabled {
		return next
	}
	return m.issuer.HTTPChallengeHandler(next)
}

// NotAfter is when the served certificate expires: the one certificate
// of self_signed and files modes, the earliest of tls.domains' in acme
// mode (names obtained on demand are not counted). It is the zero time
// while none is served. Safe for concurrent use.
func (m *Manager) NotAfter() time.Time {
	if c := m.cert.Load(); c != nil && c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	var t time.Time
	if m.cache == nil {
		return t
	}
	for _, d := range m.domains {
		for _, c := range m.cache.AllMatchingCertificates(d) {
			if c.Leaf != nil && (t.IsZero() || c.Leaf.NotAfter.Before(t)) {
				t = c.Leaf.NotAfter
			}
		}
	}
	return t
}

// HSTSHeader returns the Strict-Transport-Security value to send on HTTPS
// responses, or "" when HSTS is disabled or TLS is off.
func (m *Manager) HSTSHeader() string { return m.hsts }

// Close stops the file watcher and certmagic's maintenance and any
// certificate order still running. It is safe to call more than once.
func (m *Manager) Close() error {
	var errs []error
	m.closeOnce.Do(func() {
		if m.cancel != nil {
			m.cancel()
		}
		for _, c := range m.closers {
			if err := c(); err != nil {
				errs = append(errs, err)
			}
		}
		if m.cache != nil {
			m.cache.Stop()
		}
	})
	return errors.Join(errs...)
}

// Modern suites for TLS 1.2: ECDHE key exchange with an AEAD cipher only.
// (TLS 1.3 suites are not configurable and all qualify.)
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

func baseConfig(cfg Config) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: tls12Suites,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if cfg.MinVersion == "1.3" {
		c.MinVersion = tls.VersionTLS13
	}
	return c
}

func hstsValue(h HSTSConfig) string {
	if !h.Enabled {
		return ""
	}
	v := "max-age=" + strconv.FormatInt(int64(h.MaxAge/time.Second), 10)
	if h.IncludeSubdomains {
		v += "; includeSubDomains"
	}
	if h.Preload {
		v += "; preload"
	}
	return v
}

// getStatic serves the one certificate of self_signed and files modes.
func (m *Manager) getStatic(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := m.cert.Load()
	if c == nil {
		return nil, fmt.Errorf("tlsconf: no certificate loaded")
	}
	return c, nil
}
