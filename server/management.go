package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/portal"
	"github.com/keygate/keygate/tokenissuer"
)

// The management surfaces: the admin API and the self-service portal,
// built over one keyops service and one audit log.

// adminTokens is the admin token store as the admin API needs it.
type adminTokens struct{ a *admintoken.Authenticator }

var _ adminapi.TokenAuthenticator = adminTokens{}

func (t adminTokens) Authenticate(ctx context.Context, token string) (adminapi.Principal, bool, error) {
	info, ok, err := t.a.Authenticate(ctx, token)
	if err != nil || !ok {
		return adminapi.Principal{}, false, err
	}
	return adminapi.Principal{ID: info.ID, Scopes: info.Scopes}, true, nil
}

// auditReader is the audit log as the admin API reads it.
type auditReader struct{ r audit.Reader }

var _ adminapi.AuditReader = auditReader{}

func (a auditReader) ReadAudit(ctx context.Context, q adminapi.AuditQuery) (adminapi.AuditPage, error) {
	evs, next, err := a.r.Events(ctx, audit.Query{Since: q.Since, Actor: q.Actor, Target: q.Target, Cursor: q.Cursor, Limit: q.Limit})
	if errors.Is(err, audit.ErrInvalidCursor) {
		return adminapi.AuditPage{}, fmt.Errorf("%w: %w", keyops.ErrInvalid, err)
	}
	if err != nil {
		return adminapi.AuditPage{}, err
	}
	if evs == nil {
		evs = []audit.Event{}
	}
	return adminapi.AuditPage{Items: evs, NextCursor: next}, nil
}

// adminStore is the keystore backend's admin as the management surfaces
// use it: the keys and consumers (keyops) and the admin tokens. Both
// backends' admins are one.
type adminStore interface {
	keyops.Store
	admintoken.Store
}

var (
	_ adminStore = (*keystore.FileAdmin)(nil)
	_ adminStore = (*keystore.RedisAdmin)(nil)
)

// storeIndex is what the key-management service reads from this
// replica's copy of the keystore rather than from the store: a
// consumer's keys, and a page of the key list, come from its index and
// then their records alone, not from a read of every record (seconds and
// a gigabyte at a million keys, per portal page, admin list page or
// consumer change); a page of the consumer list, and a portal sign-in's
// consumer, likewise from its copy of the consumers. The Redis keystore
// fills it when it is opened; with the file keystore it stays empty and
// keyops reads the file.
type storeIndex struct {
	consumerKeys   keyops.ConsumerKeys
	keysPage       keyops.KeysPage
	consumersPage  keyops.ConsumersPage
	consumersWhere keyops.ConsumersWhere
}

// adminTokenDeps fills the admin token store from the keystore
// backend's admin when deps leaves it out.
func (s *Server) adminTokenDeps(deps *Deps, store admintoken.Lookup) error {
	if deps.AdminTokens == nil {
		a, err := admintoken.NewAuthenticator(admintoken.AuthConfig{Store: store})
		if err != nil {
			return err
		}
		deps.AdminTokens = adminTokens{a}
	}
	return nil
}

// auditDeps fills the audit log (writer and reader) when deps leaves it
// out.
func (s *Server) auditDeps(deps *Deps) error {
	if deps.Auditor == nil || deps.Audit == nil {
		log, err := audit.Open(s.cfg.AuditConfig(s.redis))
		if err != nil {
			return err
		}
		s.onClose(log.Close)
		if deps.Auditor == nil {
			deps.Auditor = log
		}
		if deps.Audit == nil {
			deps.Audit = auditReader{log}
		}
	}
	return nil
}

// openOps builds, once, the key-management service that the admin API
// and the portal share, over the keystore backend's admin, with the audit
// log.
func (s *Server) openOps(deps *Deps) (*keyops.Service, adminStore, error) {
	var store adminStore
	switch s.cfg.Keystore.Backend {
	case "file":
		store = &keystore.FileAdmin{Path: s.cfg.Keystore.File}
	case "redis":
		ra := &keystore.RedisAdmin{Client: s.redis, Prefix: s.cfg.Redis.KeyPrefix, ConsumerKeys: s.index.consumerKeys,
			WaitReplicas: s.cfg.Keystore.WaitReplicas, WaitTimeout: s.cfg.Keystore.WaitTimeout, Logger: s.log.Named("keystore")}
		if s.ksEvents != nil {
			ra.OnWaitTimeout = s.ksEvents.waitTimeout
		}
		store = ra
	}
	if s.ops != nil {
		return s.ops, store, nil
	}
	if err := s.auditDeps(deps); err != nil {
		return nil, nil, err
	}
	s.storeAuditor.Store(&deps.Auditor)
	limits, err := s.cfg.Resolver()
	if err != nil {
		return nil, nil, err
	}
	s.ops, err = keyops.New(keyops.Config{Store: store, Limits: limits, Auditor: deps.Auditor, Usage: UsageStore(s.cfg, s.redis), Quota: QuotaReader(s.cfg, s.redis), ConsumerKeys: s.index.consumerKeys, KeysPage: s.index.keysPage, ConsumersPage: s.index.consumersPage, ConsumersWhere: s.index.consumersWhere})
	return s.ops, store, err
}

// openAdminAPI builds the admin API, when enabled, over keyops on the
// keystore backend's admin, and opens its listener.
func (s *Server) openAdminAPI(_ context.Context, w *wiring) error {
	if !s.cfg.AdminAPI.Enabled {
		return nil
	}
	// The admin API's own choices (its token store, its usage reader)
	// stay its own.
	deps := w.deps
	ops, store, err := s.openOps(&deps)
	if err != nil {
		return err
	}
	var idemRedis redis.UniversalClient // Idempotency-Keys: in Redis with the Redis keystore, else in memory
	if s.cfg.Keystore.Backend == "redis" {
		idemRedis = s.redis
	}
	if err := s.adminTokenDeps(&deps, store); err != nil {
		return err
	}
	if deps.Usage == nil {
		deps.Usage = usageAPI{ops}
	}
	adeps := adminapi.Deps{
		Ops: ops, Tokens: deps.AdminTokens, Usage: deps.Usage, Audit: deps.Audit, Logger: s.log.Named("admin_api"),
		Redis: idemRedis, RedisPrefix: s.cfg.Redis.KeyPrefix,
	}
	if s.portal != nil { // not a nil *Portal in the interface
		adeps.Portal = s.portal
	}
	api, err := adminapi.New(s.cfg.AdminAPI, adeps)
	if err != nil {
		return fieldpath.Within("admin_api", err)
	}
	tlsConfig, err := api.TLSConfig(s.tls.TLSConfig())
	if err != nil {
		return fieldpath.Within("admin_api", err)
	}
	if deps.AdminTokens == nil && s.cfg.AdminAPI.ClientCAFile == "" {
		s.log.Warn("admin_api is enabled but accepts no credential yet: no admin token store and no admin_api.client_ca_file")
	}
	if s.adminAPILn, err = s.listen(s.cfg.AdminAPI.Listen); err != nil {
		return fmt.Errorf("admin_api.listen: %w", err)
	}
	s.adminAPI = s.managementServer(s.obs.management(listenerAdminAPI, api.Handler()), tlsConfig)
	return nil
}

// openPortal builds the self-service portal, when enabled, over the same
// keyops and audit log as the admin API, and opens its listener: HTTPS
// with the gateway's certificate, unless tls.mode is off (behind a
// TLS-terminating load balancer).
func (s *Server) openPortal(_ context.Context, w *wiring) error {
	if !s.cfg.Portal.Enabled {
		return nil
	}
	deps, trusted := &w.deps, w.trusted
	ops, _, err := s.openOps(deps)
	if err != nil {
		return err
	}
	pdeps := portal.Deps{
		Ops: ops, Auditor: deps.Auditor, Logger: s.log.Named("portal"), Getenv: deps.Getenv,
		HTTPClient: deps.PortalHTTPClient, ClientAddr: trusted.ClientAddr, DemoConsumer: deps.PortalDemoConsumer,
	}
	if s.cfg.Keystore.Backend == "redis" {
		pdeps.Redis, pdeps.RedisPrefix = s.redis, s.cfg.Redis.KeyPrefix
	}
	// The deprecation banner: API keys end at the sunset (or, without
	// one, from the deprecation date on).
	if d := s.cfg.Auth.APIKeys.Deprecation; !d.Sunset.IsZero() || !d.Date.IsZero() {
		pdeps.Sunset, pdeps.DeprecationLink = d.Sunset, d.Link
		if pdeps.Sunset.IsZero() {
			pdeps.Sunset = d.Date
		}
	}
	if tc := s.cfg.Auth.TokenEndpoint; tc.Enabled {
		pdeps.TokenURL = strings.TrimSuffix(tc.Issuer, "/") + tokenissuer.TokenPath
	}
	if pdeps.Getenv == nil {
		pdeps.Getenv = os.Getenv
	}
	if s.portal, err = portal.New(s.cfg.Portal, pdeps); err != nil {
		return fieldpath.Within("portal", err)
	}
	if s.portalLn, err = s.listen(s.cfg.Portal.Listen); err != nil {
		return fmt.Errorf("portal.listen: %w", err)
	}
	s.portalSrv = s.managementServer(s.obs.management(listenerPortal, s.portal.Handler()), s.tls.TLSConfig())
	return nil
}

// managementServer is the http.Server of the admin API or the portal:
// the server section's header limits, and 30 s for a whole request or
// response (their bodies are small).
func (s *Server) managementServer(h http.Handler, tlsConfig *tls.Config) *http.Server {
	sc := s.cfg.Server
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: sc.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       sc.IdleTimeout,
		MaxHeaderBytes:    sc.MaxHeaderBytes,
		ErrorLog:          s.errLog,
	}
}
