// Package server assembles a running keygate from its configuration: the
// key store, the limiter, the authenticators, the gateway, TLS, and the API,
// admin, admin-API and plain-HTTP listeners, with a graceful drain on
// shutdown.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/framing"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/oauth2"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/tlsconf"
	"github.com/keygate/keygate/tokenissuer"
)

// The pieces fit the interfaces their users declare.
var (
	_ gateway.Authenticator = (*auth.Chain)(nil)
	_ gateway.Limiter       = (*ratelimit.Resilient)(nil)
	_ gateway.Limiter       = (*ratelimit.Local)(nil)
	_ auth.Credential       = (*auth.APIKeys)(nil)
	_ auth.Credential       = (*oauth2.Authenticator)(nil)
	_ readyStore            = (*keystore.FileStore)(nil)
	_ readyStore            = (*keystore.RedisStore)(nil)
	_ degradable            = (*keystore.RedisStore)(nil)
	_ degradable            = (*ratelimit.Resilient)(nil)
)

// Deps are what a Server takes from its caller.
type Deps struct {
	Logger *zap.Logger
	// Getenv reads secrets named in the config (redis.password_env); nil
	// means os.Getenv.
	Getenv func(string) string
	// AdminTokens checks the admin API's bearer tokens; nil accepts none
	// (client certificates only).
	AdminTokens adminapi.TokenAuthenticator
	// Usage and Audit serve the admin API's usage and audit-events
	// endpoints; nil answers 501.
	Usage adminapi.UsageReader
	Audit adminapi.AuditReader
	// Auditor receives every change made through the admin API and the
	// portal; nil means the audit log of the audit section.
	Auditor keyops.Auditor
	// PortalDemoConsumer turns on the portal's development sign-in for
	// that consumer: `keygate demo` only, never from a file.
	PortalDemoConsumer string
	// PortalHTTPClient reaches the portal's identity provider and
	// webhook; nil means the default (tests trust their own provider).
	PortalHTTPClient *http.Client
	// Version is the build's version for keygate_build_info and the
	// traces' service.version; empty means the module's version.
	Version string
}

// Server is a running keygate. Build it with New, run it with Serve, stop
// it with Shutdown (gracefully) or Close (at once); either releases every
// component New built.
type Server struct {
	cfg      config.Config
	log      *zap.Logger
	registry *prometheus.Registry
	metrics  *gateway.Metrics
	obs      *observer
	redis    redis.UniversalClient
	store    readyStore
	// index is what keyops reads from the Redis keystore's copy; empty
	// with the file keystore.
	index   storeIndex
	limiter gateway.Limiter
	tls     *tlsconf.Manager
	oauth   *oauth2.Authenticator
	issuer  *tokenissuer.Issuer // nil unless auth.token_endpoint.enabled
	// closers is the cleanup list: what New's steps built and must
	// release, in the order built (see onClose).
	closers []func() error

	api, admin, plain *http.Server
	// h2 serves the API listener's HTTP/2 connections; nil with tls.mode
	// off (no HTTP/2 then).
	h2 *h2Conns
	// resetFlood counts and logs HTTP/2 connections ended for resets.
	resetFlood              func(net.Addr)
	errLog                  *log.Logger
	apiLn, adminLn, plainLn net.Listener
	// adminAPI serves admin_api on adminAPILn; nil unless enabled.
	adminAPI   *http.Server
	adminAPILn net.Listener
	// ops is the key-management service of the admin API and the
	// portal; nil unless one of them is enabled.
	ops *keyops.Service
	// ksEvents counts the Redis keystore's failures; nil for the file
	// backend.
	ksEvents *keystoreEvents
	// storeAuditor audits what the Redis keystore does on its own (a
	// blocked reinstatement), once the audit log is open.
	storeAuditor atomic.Pointer[keyops.Auditor]
	// portal serves the self-service portal on portalLn; nil unless
	// enabled.
	portal       *portal.Portal
	portalSrv    *http.Server
	portalLn     net.Listener
	draining     atomic.Bool
	serveErr     chan error
	shutdownOnce sync.Once
}

// readyStore is the key store as the server needs it.
type readyStore interface {
	auth.KeyLookup
	Ready() bool
	// Len is the number of key records it serves
	// (keygate_keystore_keys).
	Len() int
	Close() error
}

// degradable is implemented by components that can run degraded (the Redis
// limiter and key store while Redis is away).
type degradable interface{ Degraded() bool }

// New builds every component in order and opens the listeners, so that
// address errors surface before Serve. When a step fails, what the steps
// before it built is closed again.
func New(ctx context.Context, cfg config.Config, deps Deps) (*Server, error) {
	if err := preflight(cfg); err != nil {
		return nil, err
	}
	s, w := newServer(cfg, deps)
	for _, open := range []func(context.Context, *wiring) error{
		s.parseTrustedProxies,
		s.openTracing,
		s.openRedis,
		s.openStore,
		s.openLimiter,
		s.openFailureLimit,
		s.openIssuer,
		s.openAuth,
		// Listen before building TLS: ACME answers its challenges on
		// these listeners, so certmagic must know their ports.
		s.openListeners,
		s.openTLS,
		s.openGateway,
		s.openAPIServer,
		s.openAdminServer,
		s.openPlainServer,
		// The portal before the admin API, which makes its sign-in links.
		s.openPortal,
		s.openAdminAPI,
	} {
		if err := open(ctx, w); err != nil {
			if cerr := s.closeAll(); cerr != nil {
				s.log.Warn("a component did not close cleanly", zap.Error(cerr))
			}
			return nil, err
		}
	}
	if s.api.TLSConfig == nil {
		s.log.Warn("tls.mode is off: the API listener serves plain HTTP; run it only behind a TLS-terminating load balancer")
	}
	return s, nil
}

// APIAddr is the API listener's address.
func (s *Server) APIAddr() net.Addr { return s.apiLn.Addr() }

// AdminAddr is the admin listener's address.
func (s *Server) AdminAddr() net.Addr { return s.adminLn.Addr() }

// PortalAddr is the portal listener's address, or nil when the portal
// is off.
func (s *Server) PortalAddr() net.Addr {
	if s.portalLn == nil {
		return nil
	}
	return s.portalLn.Addr()
}

// Portal is the self-service portal, or nil when it is off.
func (s *Server) Portal() *portal.Portal { return s.portal }

// AdminAPIAddr is the admin API listener's address, or nil when
// admin_api is not enabled.
func (s *Server) AdminAPIAddr() net.Addr {
	if s.adminAPILn == nil {
		return nil
	}
	return s.adminAPILn.Addr()
}

// HTTPAddr is the plain-HTTP listener's address, or nil.
func (s *Server) HTTPAddr() net.Addr {
	if s.plainLn == nil {
		return nil
	}
	return s.plainLn.Addr()
}

// Serve serves until Shutdown and returns the first listener failure, or
// nil after a clean shutdown.
func (s *Server) Serve() error {
	// Read before Serve, which may set TLSConfig.
	tlsConfig := s.api.TLSConfig
	// The framing listener terminates TLS itself, so that it sees the
	// plaintext of HTTP/1 connections.
	lc := framing.ListenerConfig{
		TLS:              tlsConfig,
		HandshakeTimeout: handshakeTimeout(s.api),
		Logf:             s.errLog.Printf,
		// A client may cancel every stream it may have open, twice
		// over, at once, and then 33 a second (nghttp2's rate).
		H2Resets:     framing.H2ResetLimit{Burst: 2 * maxConcurrentStreams},
		OnResetFlood: s.resetFlood,
	}
	if s.h2 != nil {
		lc.ServeH2 = s.h2.serve
	}
	apiLn := framing.NewListener(s.apiLn, lc)
	go func() { s.serveErr <- s.api.Serve(apiLn) }()
	go func() { s.serveErr <- s.admin.Serve(s.adminLn) }()
	if s.plain != nil {
		go func() { s.serveErr <- s.plain.Serve(framing.NewListener(s.plainLn, framing.ListenerConfig{})) }()
	}
	if s.adminAPI != nil {
		// Read before Serve, which sets TLSConfig's NextProtos.
		ln, tlsOn := s.adminAPILn, s.adminAPI.TLSConfig != nil
		if tlsOn {
			ln = tls.NewListener(ln, s.adminAPI.TLSConfig.Clone())
		}
		go func() { s.serveErr <- s.adminAPI.Serve(ln) }()
		s.log.Info("admin API serving", zap.String("admin_api", s.adminAPILn.Addr().String()), zap.Bool("tls", tlsOn))
	}
	if s.portalSrv != nil {
		ln, tlsOn := s.portalLn, s.portalSrv.TLSConfig != nil
		if tlsOn {
			ln = tls.NewListener(ln, s.portalSrv.TLSConfig.Clone())
		}
		go func() { s.serveErr <- s.portalSrv.Serve(ln) }()
		s.log.Info("portal serving", zap.String("portal", s.portalLn.Addr().String()), zap.String("url", s.portal.URL()), zap.Bool("tls", tlsOn))
	}
	s.log.Info("keygate serving",
		zap.String("api", s.apiLn.Addr().String()),
		zap.String("admin", s.adminLn.Addr().String()),
		zap.Bool("tls", tlsConfig != nil))
	err := <-s.serveErr
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, lets in-flight requests (uploads
// included) finish within ctx, then closes every component. /readyz turns
// 503 at once so load balancers stop sending traffic.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.shutdownOnce.Do(func() {
		s.draining.Store(true)
		s.log.Info("draining: no new connections; waiting for in-flight requests")
		var wg sync.WaitGroup
		servers := []*http.Server{s.api, s.plain, s.adminAPI, s.portalSrv}
		errs := make([]error, len(servers)+1)
		for i, srv := range servers {
			if srv == nil {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = srv.Shutdown(ctx) }()
		}
		wg.Wait()
		var h2err error
		if s.h2 != nil {
			// The API server's Shutdown sent its HTTP/2 connections
			// GOAWAY; they drain within the same deadline.
			h2err = s.h2.shutdown(ctx)
		}
		// The admin server drains last, so /readyz reports "draining" for
		// as long as the others do.
		servers = append(servers, s.admin)
		errs[len(errs)-1] = s.admin.Shutdown(ctx)
		// Past the drain timeout, cut off whatever connection is left on
		// any listener.
		for i, srv := range servers {
			if srv != nil && errs[i] != nil {
				_ = srv.Close()
			}
		}
		if cerr := s.closeAll(); cerr != nil {
			s.log.Warn("a component did not close cleanly", zap.Error(cerr))
		}
		err = errors.Join(append(errs, h2err)...)
		s.log.Info("stopped")
	})
	return err
}

// Close stops the server at once: it closes every listener and
// connection without waiting for in-flight requests, then every
// component in the reverse order New built them, and returns what
// failed to close. Shutdown is the graceful way. Only the first call of
// Close or Shutdown does anything.
func (s *Server) Close() error {
	var err error
	s.shutdownOnce.Do(func() {
		s.draining.Store(true)
		var errs []error
		for _, srv := range []*http.Server{s.api, s.plain, s.adminAPI, s.portalSrv, s.admin} {
			if srv != nil {
				errs = append(errs, srv.Close())
			}
		}
		if s.h2 != nil {
			// With its context already ended, shutdown closes every
			// HTTP/2 connection and waits for their handlers.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = s.h2.shutdown(ctx)
		}
		errs = append(errs, s.closeAll())
		err = errors.Join(errs...)
		s.log.Info("stopped")
	})
	return err
}

// Run serves until ctx ends, then shuts down within server.drain_timeout.
func Run(ctx context.Context, cfg config.Config, deps Deps) error {
	s, err := New(ctx, cfg, deps)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	select {
	case err := <-done:
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.DrainTimeout)
		defer cancel()
		_ = s.Shutdown(sctx)
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.DrainTimeout)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// handshakeTimeout bounds a TLS handshake as net/http would: the shortest
// of the server's read-header, read and write timeouts, 10 s when none is
// set.
func handshakeTimeout(srv *http.Server) time.Duration {
	var d time.Duration
	for _, t := range []time.Duration{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout} {
		if t > 0 && (d == 0 || t < d) {
			d = t
		}
	}
	if d == 0 {
		d = 10 * time.Second
	}
	return d
}

// port is a listener's TCP port, or 0 for none.
func port(ln net.Listener) int {
	if ln == nil {
		return 0
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// httpErrorLog is net/http's error log as zap: TLS handshake failures
// (scanners, health checks, clients that distrust a dev certificate) at
// debug, everything else at warn.
type httpErrorLog struct{ l *zap.Logger }

func (w httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		w.l.Debug(msg)
	} else {
		w.l.Warn(msg)
	}
	return len(p), nil
}
