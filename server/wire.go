package server

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/framing"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/oauth2"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/redact"
	"github.com/keygate/keygate/redisconn"
	"github.com/keygate/keygate/tlsconf"
	"github.com/keygate/keygate/tracing"
)

// The steps of New, in the order it runs them. Each builds one component
// from the configuration and puts whatever it must release on the
// server's cleanup list (onClose) as soon as it holds it, so that a later
// step's failure, Close and Shutdown all release it, in reverse order.

// wiring is what New's steps hand on to later steps.
type wiring struct {
	deps   Deps
	getenv func(string) string
	tracer *tracing.Provider
	// trusted are server.trusted_proxies, parsed.
	trusted  clientip.TrustedProxies
	failures gateway.FailureLimiter
	authn    gateway.Authenticator
	// gateway is the API listener's handler.
	gateway http.Handler
	// refused counts the framing refusals of the API and plain-HTTP
	// listeners.
	refused *prometheus.CounterVec
}

// preflight checks what New needs before it builds anything.
func preflight(cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Checked here, not in config.Validate: a config is often validated on
	// another machine than the one that runs it.
	if d := cfg.Server.SpoolDir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return fmt.Errorf("server.spool_dir: %q must be an existing directory", d)
		}
	}
	return nil
}

// newServer is a server that holds nothing yet, and what its steps start
// from.
func newServer(cfg config.Config, deps Deps) (*Server, *wiring) {
	s := &Server{cfg: cfg, log: deps.Logger, registry: prometheus.NewRegistry(), serveErr: make(chan error, 4)}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	// Redact credentials from every line, whoever logs it (the access
	// log, net/http's and ReverseProxy's error logs, TLS, certmagic). A
	// no-op when the caller's logger already redacts.
	s.log = s.log.WithOptions(zap.WrapCore(redact.Core))
	s.errLog = log.New(httpErrorLog{s.log.Named("http")}, "", 0)
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.metrics = gateway.NewMetrics(s.registry)
	w := &wiring{deps: deps, getenv: deps.Getenv}
	if w.getenv == nil {
		w.getenv = os.Getenv
	}
	return s, w
}

// onClose puts f on the cleanup list; closeAll runs the list backwards.
func (s *Server) onClose(f func() error) { s.closers = append(s.closers, f) }

// closeAll runs the cleanup list backwards, once: the last component
// built is closed first.
func (s *Server) closeAll() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

func (s *Server) openTracing(ctx context.Context, w *wiring) error {
	tp, err := tracing.New(ctx, s.cfg.Tracing, tracing.Deps{Getenv: w.getenv, Version: version(w.deps.Version)})
	if err != nil {
		return fieldpath.Within("tracing", err)
	}
	w.tracer = tp
	s.obs = newObserver(s.registry, w.deps.Version, tp)
	// First on the list, so closed last: the drained requests' spans are
	// exported before Shutdown returns.
	s.onClose(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return tp.Shutdown(ctx)
	})
	return nil
}

// openRedis connects to Redis when a section keeps its state there; one
// client for all of them.
func (s *Server) openRedis(_ context.Context, w *wiring) error {
	cfg := s.cfg
	if cfg.Keystore.Backend != "redis" && cfg.RateLimit.Backend != "redis" && cfg.TLS.Storage != "redis" {
		return nil
	}
	rc, err := redisconn.New(cfg.Redis, w.deps.Getenv)
	if err != nil {
		return fieldpath.Within("redis", err)
	}
	s.redis = rc
	s.onClose(rc.Close)
	return nil
}

func (s *Server) openStore(context.Context, *wiring) error {
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
		s.index = storeIndex{consumerKeys: rs.ConsumerKeys, keysPage: rs.KeysPage, consumersPage: rs.ConsumersPage, consumersWhere: rs.ConsumersWhere}
	default:
		return fmt.Errorf("keystore.backend: %q is not available", s.cfg.Keystore.Backend)
	}
	registerKeyCount(s.registry, s.store)
	s.onClose(s.store.Close)
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

// openLimiter builds the rate limiter. Neither kind holds a connection or
// a goroutine of its own (the Redis one uses the shared client), so
// neither is on the cleanup list.
func (s *Server) openLimiter(context.Context, *wiring) error {
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

// openAuth builds the authenticator chain: API keys, then bearer tokens of
// auth.oauth2's issuer and of the token endpoint.
func (s *Server) openAuth(ctx context.Context, w *wiring) error {
	var opts []auth.Option
	if s.cfg.Auth.APIKeys.Enabled {
		keys, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: s.store})
		if err != nil {
			return err
		}
		opts = append(opts, auth.Option{Method: auth.MethodAPIKey, Credential: keys, Products: s.cfg.Auth.APIKeys.Products})
	}
	if s.cfg.Auth.OAuth2.Enabled {
		ops, err := s.cfg.OperationTable()
		if err != nil {
			return err
		}
		a, err := oauth2.New(ctx, s.cfg.Auth.OAuth2, oauth2.Deps{Logger: s.log.Named("oauth2"), Operations: ops})
		if err != nil {
			return fieldpath.Within("auth.oauth2", err)
		}
		s.oauth = a
		s.onClose(a.Close)
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
			return err
		}
		opts = append(opts, auth.Option{Method: auth.MethodOAuth2, Credential: b})
	}
	authn, err := auth.NewChain(opts...)
	if err != nil {
		return err
	}
	w.authn = authn
	return nil
}

// parseTrustedProxies reads server.trusted_proxies, which the client
// address of the token endpoint, the portal and the gateway come from.
func (s *Server) parseTrustedProxies(_ context.Context, w *wiring) error {
	trusted, err := clientip.ParseTrustedProxies("server.trusted_proxies", s.cfg.Server.TrustedProxies)
	w.trusted = trusted
	return err
}

// openListeners opens the API, admin and plain-HTTP listeners.
func (s *Server) openListeners(context.Context, *wiring) error {
	sc := s.cfg.Server
	var err error
	if s.apiLn, err = s.listen(sc.Listen); err != nil {
		return fmt.Errorf("server.listen: %w", err)
	}
	if s.adminLn, err = s.listen(sc.AdminListen); err != nil {
		return fmt.Errorf("server.admin_listen: %w", err)
	}
	if sc.HTTPListen != "" {
		if s.plainLn, err = s.listen(sc.HTTPListen); err != nil {
			return fmt.Errorf("server.http_listen: %w", err)
		}
	}
	return nil
}

// listen opens a TCP listener and puts it on the cleanup list.
func (s *Server) listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.onClose(func() error {
		// The http.Server serving it may have closed it already.
		if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	return ln, nil
}

// openTLS builds the API listener's certificates (and ACME's challenge
// answers).
func (s *Server) openTLS(ctx context.Context, _ *wiring) error {
	m, err := tlsconf.New(ctx, s.cfg.TLS, tlsconf.Deps{
		Logger:      s.log.Named("tls"),
		Redis:       s.redis,
		RedisPrefix: s.cfg.Redis.KeyPrefix + "certmagic:",
		TLSPort:     port(s.apiLn),
		HTTPPort:    port(s.plainLn),
	})
	if err != nil {
		return fieldpath.Within("tls", err)
	}
	s.tls = m
	s.onClose(m.Close)
	registerCertExpiry(s.registry, m.NotAfter)
	return nil
}

// openGateway builds the request path: the route table's rows of the
// token endpoint and of secret scanning, usage counting, and the gateway.
func (s *Server) openGateway(ctx context.Context, w *wiring) error {
	cfg := s.cfg
	ops, err := cfg.OperationTable()
	if err != nil {
		return err
	}
	scanEPs, err := s.secretScanEndpoints(ctx, &w.deps, w.getenv)
	if err != nil {
		return err
	}
	counters, err := s.openUsage(ctx)
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Config{
		Upstreams:        gatewayUpstreams(cfg.Upstreams),
		MaxBodyBytes:     cfg.Server.MaxBodyBytes,
		SpoolMemoryBytes: cfg.Server.SpoolMemoryBytes,
		SpoolDir:         cfg.Server.SpoolDir,
		Limits:           cfg.RateLimit.Limits,
		RateLimitStatus:  cfg.RateLimit.Status,
		HSTS:             s.tls.HSTSHeader(),
		Deprecation:      gatewayDeprecation(cfg.Auth.APIKeys.Deprecation),
		BodyIdleTimeout:  cfg.Server.BodyIdleTimeout,
		MinBodyRate:      cfg.Server.MinBodyRate,
		MaxConcurrent:    cfg.RateLimit.MaxConcurrent,
		TrustedProxies:   w.trusted,
		Operations:       ops,
		Endpoints:        append(s.issuerEndpoints(), scanEPs...),
		RateLimitHeaders: cfg.RateLimit.Headers,
	}, gateway.Deps{
		Auth: w.authn, Limiter: s.limiter, Logger: s.log.Named("access"),
		Metrics: s.metrics, Failures: w.failures, Usage: counters, Tracer: w.tracer.Tracer(),
	})
	if err != nil {
		return err
	}
	// The gateway's pooled upstream connections: closed after the API
	// listener has drained, so no request still uses one.
	s.onClose(gw.Close)
	w.gateway = gw
	return nil
}

// openAPIServer builds the API listener's server: the gateway behind the
// framing guard, with HTTP/2 when it serves TLS.
func (s *Server) openAPIServer(_ context.Context, w *wiring) error {
	sc := s.cfg.Server
	w.refused = gateway.NewFramingCounter(s.registry)
	s.api = &http.Server{
		Handler:     s.obs.listener(listenerAPI, framing.Guard(w.gateway, gateway.RefuseFraming(s.log.Named("access"), "api", w.refused))),
		ConnContext: framing.ConnContext,
		// framing.Guard must see every request of a connection.
		DisableGeneralOptionsHandler: true,
		TLSConfig:                    s.tls.TLSConfig(),
		ReadHeaderTimeout:            sc.ReadHeaderTimeout,
		ReadTimeout:                  sc.ReadTimeout,
		WriteTimeout:                 sc.WriteTimeout,
		IdleTimeout:                  sc.IdleTimeout,
		MaxHeaderBytes:               sc.MaxHeaderBytes,
		ErrorLog:                     s.errLog,
	}
	if s.api.TLSConfig != nil {
		h2, err := newH2Conns(s.api)
		if err != nil {
			return fmt.Errorf("http2: %w", err)
		}
		s.h2 = h2
		s.resetFlood = resetFloods(s.registry, s.log.Named("http"))
	}
	return nil
}

// openAdminServer builds the admin listener's server: /healthz, /readyz
// and /metrics.
func (s *Server) openAdminServer(context.Context, *wiring) error {
	s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: s.cfg.Server.IdleTimeout, ErrorLog: s.errLog}
	return nil
}

// openPlainServer builds the plain-HTTP listener's server, when
// server.http_listen is set: ACME's http-01 answers, redirects, and
// refusals of credentials sent in clear.
func (s *Server) openPlainServer(_ context.Context, w *wiring) error {
	if s.plainLn == nil {
		return nil
	}
	sc := s.cfg.Server
	exposed := gateway.NewExposedCounter(s.registry)
	for _, kind := range []string{"api_key", "authorization", "url", "client_secret"} {
		exposed.WithLabelValues(kind) // at 0, so the first exposure is an increase
	}
	plain := &gateway.PlainHTTP{HTTPSPort: strconv.Itoa(port(s.apiLn)), Hosts: redirectHosts(s.cfg), TokenPath: s.tokenPath(), Auth: w.authn, Logger: s.log.Named("plain_http"), Exposed: exposed}
	s.plain = &http.Server{
		Handler: s.obs.listener(listenerPlainHTTP, framing.Guard(gateway.LogPlainAccess(s.log.Named("access"), s.tls.HTTPChallengeHandler(plain)),
			gateway.RefuseFraming(s.log.Named("plain_http"), "plain_http", w.refused))),
		ConnContext:                  framing.ConnContext,
		DisableGeneralOptionsHandler: true,
		ReadHeaderTimeout:            sc.ReadHeaderTimeout,
		ReadTimeout:                  30 * time.Second,
		IdleTimeout:                  sc.IdleTimeout,
		MaxHeaderBytes:               sc.MaxHeaderBytes,
		ErrorLog:                     s.errLog,
	}
	return nil
}
