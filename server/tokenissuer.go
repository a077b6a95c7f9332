package server

import (
	"context"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/tokenissuer"
)

// TokenKeyStore is where auth.token_endpoint keeps its signing keys: in
// the keystore backend, a 0600 file beside the keys file or Redis under
// redis.key_prefix.
func TokenKeyStore(cfg config.Config, rc redis.UniversalClient) tokenissuer.Store {
	if cfg.Keystore.Backend == "redis" {
		return tokenissuer.NewRedisStore(rc, cfg.Redis.KeyPrefix)
	}
	return tokenissuer.NewFileStore(tokenissuer.FilePathBeside(cfg.Keystore.File))
}

// RotationAuditor records signing-key rotations in the audit log as
// token_key.rotate events (kid and alg, never key material).
type RotationAuditor struct {
	Auditor keyops.Auditor
	Actor   keyops.Actor
}

// SigningKeyRotated implements tokenissuer.Auditor.
func (a RotationAuditor) SigningKeyRotated(ctx context.Context, kid, alg string, immediately bool) {
	if a.Auditor == nil {
		return
	}
	changes := map[string]string{"alg": alg, "previous_keys": "published until their tokens expire"}
	if immediately {
		changes["previous_keys"] = "withdrawn now"
	}
	_ = a.Auditor.Audit(ctx, keyops.Event{Time: time.Now().UTC(), Actor: a.Actor, Action: "token_key.rotate", Target: kid, Changes: changes})
}

// openIssuer starts auth.token_endpoint when enabled, with the audit log
// its signing-key rotations are recorded in.
func (s *Server) openIssuer(ctx context.Context, w *wiring) error {
	tc := s.cfg.Auth.TokenEndpoint
	if !tc.Enabled {
		return nil
	}
	if err := s.auditDeps(&w.deps); err != nil {
		return err
	}
	failures, trusted, auditor := w.failures, w.trusted, w.deps.Auditor
	deps := tokenissuer.Deps{
		Store:         TokenKeyStore(s.cfg, s.redis),
		Keys:          s.store,
		ProductScopes: s.cfg.Auth.OAuth2.ProductScopes,
		ContextClaim:  s.cfg.Auth.OAuth2.ContextClaim,
		ClientAddr:    trusted.ClientAddr,
		Limiter:       s.limiter,
		Logger:        s.log,
	}
	if failures != nil {
		deps.Failures = failures
	}
	if auditor != nil {
		deps.Auditor = RotationAuditor{Auditor: auditor, Actor: keyops.Actor{ID: "keygate:scheduled-rotation"}}
	}
	iss, err := tokenissuer.New(ctx, tc, deps)
	if err != nil {
		return fieldpath.Within("auth.token_endpoint", err)
	}
	s.issuer = iss
	s.onClose(iss.Close)
	registerTokenCacheMetrics(s.registry, "local", iss.CacheStats)
	return nil
}

// issuerEndpoints are the route-table rows of auth.token_endpoint.
func (s *Server) issuerEndpoints() []gateway.Endpoint {
	if s.issuer == nil {
		return nil
	}
	return []gateway.Endpoint{
		{Path: tokenissuer.TokenPath, Methods: []string{http.MethodPost}, Form: true, MaxBodyBytes: tokenissuer.MaxFormBytes, OAuthErrors: true, Handler: s.issuer.TokenHandler()},
		{Path: tokenissuer.MetadataPath, Methods: []string{http.MethodGet}, Handler: s.issuer.MetadataHandler()},
		{Path: tokenissuer.JWKSPath, Methods: []string{http.MethodGet}, Handler: s.issuer.JWKSHandler()},
	}
}

// tokenPath is the token endpoint's path when it is on, for the plain-HTTP
// listener's OAuth-shaped refusals there.
func (s *Server) tokenPath() string {
	if s.issuer == nil {
		return ""
	}
	return tokenissuer.TokenPath
}
