package tlsconf

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/keygate/keygate/internal/fieldpath"

	"github.com/keygate/keygate/internal/capool"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"github.com/keygate/keygate/certstore"
)

// errNotAllowed refuses on-demand issuance for a name not in the allow list.
var errNotAllowed = errors.New("name not allowed for on-demand TLS")

func (m *Manager) startACME(ctx, bg context.Context, cfg Config, deps Deps) error {
	var storage certmagic.Storage
	switch cfg.Storage {
	case "redis":
		if deps.Redis == nil {
			return fieldpath.Errorf("storage", "redis needs a Redis client (the redis section)")
		}
		s, err := certstore.NewRedis(deps.Redis, certstore.Options{Prefix: deps.RedisPrefix, Logger: m.logger})
		if err != nil {
			return fieldpath.Errorf("storage", "%w", err)
		}
		storage = s
	default:
		storage = &certmagic.FileStorage{Path: cfg.StoragePath}
	}

	var roots *x509.CertPool
	if cfg.CARoot != "" {
		var err error
		if roots, err = capool.Load(cfg.CARoot); err != nil {
			return fieldpath.Errorf("ca_root", "%w", err)
		}
	}

	var onDemand *certmagic.OnDemandConfig
	if cfg.OnDemand.Enabled {
		// certmagic defers every name to its first handshake once
		// on-demand is on, so tls.domains are allowed here too.
		allowed := make(map[string]bool)
		for _, n := range append(slices.Clone(cfg.OnDemand.Allow), cfg.Domains...) {
			allowed[strings.ToLower(n)] = true
		}
		onDemand = &certmagic.OnDemandConfig{
			DecisionFunc: func(_ context.Context, name string) error {
				if allowed[strings.ToLower(name)] {
					return nil
				}
				return fmt.Errorf("%w: %q", errNotAllowed, name)
			},
		}
	}

	var magic *certmagic.Config
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           m.logger.Named("certmagic"),
	})
	magic = certmagic.New(m.cache, certmagic.Config{
		Storage:  storage,
		OnDemand: onDemand,
		Logger:   m.logger.Named("certmagic"),
	})
	m.httpEnabled = slices.Contains(cfg.Challenges, ChallengeHTTP01)
	alpnEnabled := slices.Contains(cfg.Challenges, ChallengeTLSALPN01)
	m.issuer = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:                      cfg.CA,
		Email:                   cfg.Email,
		Agreed:                  true,
		DisableHTTPChallenge:    !m.httpEnabled,
		DisableTLSALPNChallenge: !alpnEnabled,
		AltHTTPPort:             deps.HTTPPort,
		AltTLSALPNPort:          deps.TLSPort,
		TrustedRoots:            roots,
		Logger:                  m.logger.Named("acme"),
	})
	magic.Issuers = []certmagic.Issuer{m.issuer}
	m.magic = magic
	m.domains = slices.Clone(cfg.Domains)

	m.base.GetCertificate = magic.GetCertificate
	if alpnEnabled {
		m.base.NextProtos = append(m.base.NextProtos, "acme-tls/1")
	}

	if len(cfg.Domains) > 0 && !cfg.OnDemand.Enabled {
		// Serve what storage already has from the first handshake on;
		// ManageAsync then only checks renewal and obtains what is missing.
		for _, d := range cfg.Domains {
			if _, err := magic.CacheManagedCertificate(ctx, d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				m.logger.Warn("tls: loading stored certificate", zap.String("domain", d), zap.Error(err))
			}
		}
	}
	if len(cfg.Domains) > 0 {
		if err := magic.ManageAsync(bg, cfg.Domains); err != nil {
			return fieldpath.Errorf("domains", "%w", err)
		}
	}
	m.logger.Info("tls: acme certificate management started",
		zap.Strings("domains", cfg.Domains), zap.String("ca", cfg.CA),
		zap.String("storage", cfg.Storage), zap.Bool("on_demand", cfg.OnDemand.Enabled))
	return nil
}
