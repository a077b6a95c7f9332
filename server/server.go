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
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/framing"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/oauth2"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/redact"
	"github.com/keygate/keygate/redisconn"
	"github.com/keygate/keygate/tlsconf"
	"github.com/keygate/keygate/tokenissuer"
	"github.com/keygate/keygate/tracing"
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
	// AccessLog is the gateway's access lines' sink (gateway.Deps.AccessLog):
	// the sink behind Logger's JSON lines, or nil to send them through
	// Logger.
	AccessLog io.Writer
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
// it with Shutdown.
type Server struct {
	cfg      config.Config
	log      *zap.Logger
	registry *prometheus.Registry
	metrics  *gateway.Metrics
	obs      *observer
	redis    redis.UniversalClient
	store    readyStore
	limiter  gateway.Limiter
	tls      *tlsconf.Manager
	oauth    *oauth2.Authenticator
	issuer   *tokenissuer.Issuer // nil unless auth.token_endpoint.enabled
	closers  []func() error

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
	Close() error
}

// degradable is implemented by components that can run degraded (the Redis
// limiter and key store while Redis is away).
type degradable interface{ Degraded() bool }

// New builds every component and opens the listeners, so address errors
// surface before Serve.
func New(ctx context.Context, cfg config.Config, deps Deps) (s *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Checked here, not in config.Validate: a config is often validated on
	// another machine than the one that runs it.
	if d := cfg.Server.SpoolDir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("server.spool_dir: %q must be an existing directory", d)
		}
	}
	s = &Server{cfg: cfg, log: deps.Logger, registry: prometheus.NewRegistry(), serveErr: make(chan error, 4)}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	// Redact credentials from every line, whoever logs it (the access
	// log, net/http's and ReverseProxy's error logs, TLS, certmagic). A
	// no-op when the caller's logger already redacts.
	s.log = s.log.WithOptions(zap.WrapCore(redact.Core))
	built := s // the returns below set s to nil; close what was opened
	defer func() {
		if err != nil {
			built.closeAll()
		}
	}()
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.metrics = gateway.NewMetrics(s.registry)
	getenv := deps.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	tp, err := tracing.New(ctx, cfg.Tracing, tracing.Deps{Getenv: getenv, Version: version(deps.Version)})
	if err != nil {
		return nil, fieldpath.Within("tracing", err)
	}
	s.obs = newObserver(s.registry, deps.Version, tp)
	// Closed last (closers run backwards): the drained requests' spans
	// are exported before Shutdown returns.
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return tp.Shutdown(ctx)
	})

	if cfg.Keystore.Backend == "redis" || cfg.RateLimit.Backend == "redis" || cfg.TLS.Storage == "redis" {
		s.redis, err = redisconn.New(cfg.Redis, deps.Getenv)
		if err != nil {
			return nil, fieldpath.Within("redis", err)
		}
		s.closers = append(s.closers, s.redis.Close)
	}

	if err := s.openStore(); err != nil {
		return nil, err
	}
	if err := s.openLimiter(); err != nil {
		return nil, err
	}
	failures, err := s.openFailureLimit()
	if err != nil {
		return nil, err
	}
	trusted, err := clientip.ParseTrustedProxies("server.trusted_proxies", cfg.Server.TrustedProxies)
	if err != nil {
		return nil, err
	}
	if cfg.Auth.TokenEndpoint.Enabled {
		// Signing-key rotations are audited.
		if err := s.auditDeps(&deps); err != nil {
			return nil, err
		}
	}
	if err := s.openIssuer(ctx, failures, trusted, deps.Auditor); err != nil {
		return nil, err
	}
	authn, err := s.openAuth(ctx)
	if err != nil {
		return nil, err
	}

	// Listen before building TLS: ACME answers its challenges on these
	// listeners, so certmagic must know their ports.
	sc := cfg.Server
	if s.apiLn, err = net.Listen("tcp", sc.Listen); err != nil {
		return nil, fmt.Errorf("server.listen: %w", err)
	}
	if s.adminLn, err = net.Listen("tcp", sc.AdminListen); err != nil {
		return nil, fmt.Errorf("server.admin_listen: %w", err)
	}
	if sc.HTTPListen != "" {
		if s.plainLn, err = net.Listen("tcp", sc.HTTPListen); err != nil {
			return nil, fmt.Errorf("server.http_listen: %w", err)
		}
	}
	s.tls, err = tlsconf.New(ctx, cfg.TLS, tlsconf.Deps{
		Logger:      s.log.Named("tls"),
		Redis:       s.redis,
		RedisPrefix: cfg.Redis.KeyPrefix + "certmagic:",
		TLSPort:     port(s.apiLn),
		HTTPPort:    port(s.plainLn),
	})
	if err != nil {
		return nil, fieldpath.Within("tls", err)
	}
	s.closers = append(s.closers, s.tls.Close)
	registerCertExpiry(s.registry, s.tls.NotAfter)

	ops, err := cfg.OperationTable()
	if err != nil {
		return nil, err
	}
	scanEPs, err := s.secretScanEndpoints(ctx, &deps, getenv)
	if err != nil {
		return nil, err
	}
	gw, err := gateway.New(gateway.Config{
		Upstreams:        cfg.Upstreams,
		MaxBodyBytes:     cfg.Server.MaxBodyBytes,
		SpoolMemoryBytes: cfg.Server.SpoolMemoryBytes,
		SpoolDir:         cfg.Server.SpoolDir,
		Limits:           cfg.RateLimit.Limits,
		RateLimitStatus:  cfg.RateLimit.Status,
		HSTS:             s.tls.HSTSHeader(),
		Deprecation:      cfg.Auth.APIKeys.Deprecation,
		BodyIdleTimeout:  cfg.Server.BodyIdleTimeout,
		MinBodyRate:      cfg.Server.MinBodyRate,
		MaxConcurrent:    cfg.RateLimit.MaxConcurrent,
		TrustedProxies:   trusted,
		Operations:       ops,
		Endpoints:        append(s.issuerEndpoints(), scanEPs...),
		RateLimitHeaders: cfg.RateLimit.Headers,
	}, gateway.Deps{Auth: authn, Limiter: s.limiter, Logger: s.log.Named("access"), AccessLog: deps.AccessLog, Metrics: s.metrics, Failures: failures, Usage: s.openUsage(), Tracer: tp.Tracer()})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, gw.Close)

	errLog := log.New(httpErrorLog{s.log.Named("http")}, "", 0)
	s.errLog = errLog
	refused := gateway.NewFramingCounter(s.registry)
	s.api = &http.Server{
		Handler:     s.obs.listener(listenerAPI, framing.Guard(gw, gateway.RefuseFraming(s.log.Named("access"), "api", refused))),
		ConnContext: framing.ConnContext,
		// framing.Guard must see every request of a connection.
		DisableGeneralOptionsHandler: true,
		TLSConfig:                    s.tls.TLSConfig(),
		ReadHeaderTimeout:            sc.ReadHeaderTimeout,
		ReadTimeout:                  sc.ReadTimeout,
		WriteTimeout:                 sc.WriteTimeout,
		IdleTimeout:                  sc.IdleTimeout,
		MaxHeaderBytes:               sc.MaxHeaderBytes,
		ErrorLog:                     errLog,
	}
	if s.api.TLSConfig != nil {
		if s.h2, err = newH2Conns(s.api); err != nil {
			return nil, fmt.Errorf("http2: %w", err)
		}
		s.resetFlood = resetFloods(s.registry, s.log.Named("http"))
	}
	s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: sc.IdleTimeout, ErrorLog: errLog}
	if s.plainLn != nil {
		exposed := gateway.NewExposedCounter(s.registry)
		for _, kind := range []string{"api_key", "authorization", "url", "client_secret"} {
			exposed.WithLabelValues(kind) // at 0, so the first exposure is an increase
		}
		plain := &gateway.PlainHTTP{HTTPSPort: strconv.Itoa(port(s.apiLn)), Hosts: redirectHosts(cfg), TokenPath: s.tokenPath(), Auth: authn, Logger: s.log.Named("plain_http"), Exposed: exposed}
		s.plain = &http.Server{
			Handler: s.obs.listener(listenerPlainHTTP, framing.Guard(gateway.LogPlainAccess(s.log.Named("access"), s.tls.HTTPChallengeHandler(plain)),
				gateway.RefuseFraming(s.log.Named("plain_http"), "plain_http", refused))),
			ConnContext:                  framing.ConnContext,
			DisableGeneralOptionsHandler: true,
			ReadHeaderTimeout:            sc.ReadHeaderTimeout,
			ReadTimeout:                  30 * time.Second,
			IdleTimeout:                  sc.IdleTimeout,
			MaxHeaderBytes:               sc.MaxHeaderBytes,
			ErrorLog:                     errLog,
		}
	}
	// The portal first: the admin API makes its sign-in links.
	if cfg.Portal.Enabled {
		if err := s.openPortal(&deps, trusted); err != nil {
			return nil, err
		}
	}
	if cfg.AdminAPI.Enabled {
		if err := s.openAdminAPI(deps); err != nil {
			return nil, err
		}
	}
	if s.api.TLSConfig == nil {
		s.log.Warn("tls.mode is off: the API listener serves plain HTTP; run it only behind a TLS-terminating load balancer")
	}
	return s, nil
}

func (s *Server) openStore() error {
	onReload := registerKeystoreMetrics(s.registry)
	limits, err := s.cfg.Resolver()
	if err != nil {
		return err
	}
	switch s.cfg.Keystore.Backend {
	case "file":
		fs, err := keystore.OpenFile(keystore.FileConfig{Path: s.cfg.Keystore.File, Logger: s.log.Named("keystore"), OnReload: onReload, Limits: limits})
		if err != nil {
			return fmt.Errorf("keystore.file: %w", err)
		}
		s.store = fs
	case "redis":
		s.ksEvents = newKeystoreEvents(s.registry)
		rs, err := keystore.OpenRedis(keystore.RedisConfig{
			Client:         s.redis,
			Prefix:         s.cfg.Redis.KeyPrefix,
			Logger:         s.log.Named("keystore"),
			ResyncInterval: s.cfg.Keystore.ResyncInterval,
			Timeout:        s.cfg.RateLimit.RedisTimeout,
			OnReload:       onReload,
			Limits:         limits,
			FailClosed:     s.cfg.Keystore.OnDataLoss == config.OnDataLossFailClosed,
			OnBlocked:      s.reinstatementBlocked,
			OnLogGap:       s.ksEvents.logGaps.Inc,
			OnDataLoss:     func(string) { s.ksEvents.dataLoss.Inc() },
		})
		if err != nil {
			return err
		}
		registerDegraded(s.registry, "keygate_keystore_degraded", "1 while the Redis keystore cannot reach Redis, or Redis lost keystore data: cached keys work, unknown keys get 503.", rs)
		s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "keygate_keystore_data_loss",
			Help: "1 while the Redis keystore runs on its last good set because Redis lost keystore data, until its repair completes.",
		}, func() float64 {
			if rs.DataLoss() != "" {
				return 1
			}
			return 0
		}))
		s.store = rs
	default:
		return fmt.Errorf("keystore.backend: %q is not available", s.cfg.Keystore.Backend)
	}
	if l, ok := s.store.(interface{ Len() int }); ok {
		registerKeyCount(s.registry, l)
	}
	s.closers = append(s.closers, s.store.Close)
	return nil
}

// reinstatementBlocked counts, and audits once the audit log is open, a
// re-read of Redis that would have reinstated a key this replica saw
// ended (keystore.RedisConfig.OnBlocked).
func (s *Server) reinstatementBlocked(r keystore.Record) {
	s.ksEvents.blocked.Inc()
	if a := s.storeAuditor.Load(); a != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := (*a).Audit(ctx, keyops.Event{Time: time.Now().UTC(), Actor: keyops.Actor{ID: "keygate:keystore"}, Action: "key.reinstatement_blocked",
			Target: r.ID, Changes: map[string]string{"status": string(r.Status)}})
		if err != nil {
			s.log.Warn("keystore: a blocked reinstatement was not audited", zap.String("key_id", r.ID), zap.Error(err))
		}
	}
}

func (s *Server) openLimiter() error {
	rc := s.cfg.RateLimit
	if rc.Backend == ratelimit.BackendLocal {
		s.limiter = rc.NewLocal(nil)
		return nil
	}
	l, err := rc.NewRedis(ratelimit.RedisDeps{Client: s.redis, KeyPrefix: s.cfg.Redis.KeyPrefix, Logger: s.log.Named("ratelimit")})
	if err != nil {
		return fieldpath.Within("ratelimit", err)
	}
	s.limiter = newTimedLimiter(s.registry, l)
	registerLimiterMetrics(s.registry, l)
	return nil
}

func (s *Server) openAuth(ctx context.Context) (gateway.Authenticator, error) {
	var opts []auth.Option
	if s.cfg.Auth.APIKeys.Enabled {
		keys, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: s.store})
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth.Option{Method: auth.MethodAPIKey, Credential: keys, Products: s.cfg.Auth.APIKeys.Products})
	}
	if s.cfg.Auth.OAuth2.Enabled {
		ops, err := s.cfg.OperationTable()
		if err != nil {
			return nil, err
		}
		a, err := oauth2.New(ctx, s.cfg.Auth.OAuth2, oauth2.Deps{Logger: s.log.Named("oauth2"), Operations: ops})
		if err != nil {
			return nil, fieldpath.Within("auth.oauth2", err)
		}
		s.oauth = a
		s.closers = append(s.closers, a.Close)
		registerTokenCacheMetrics(s.registry, "external", a.CacheStats)
	}
	if s.oauth != nil || s.issuer != nil {
		// One bearer credential for both issuers: a token goes to the
		// issuer its iss names.
		var local oauth2.LocalIssuer
		if s.issuer != nil {
			local = s.issuer
		}
		b, err := oauth2.NewBearer(local, s.oauth)
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth.Option{Method: auth.MethodOAuth2, Credential: b})
	}
	return auth.NewChain(opts...)
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
		s.closeAll()
		err = errors.Join(append(errs, h2err)...)
		s.log.Info("stopped")
	})
	return err
}

func (s *Server) closeAll() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
	s.closers = nil
	for _, ln := range []net.Listener{s.apiLn, s.adminLn, s.plainLn, s.adminAPILn, s.portalLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
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
