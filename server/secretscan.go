package server

import (
	"context"
	"net/http"

	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/keygate/keygate/secretscan"
)

// secretScanEndpoints builds the secret_scanning section's alert handler
// (and its webhook) and returns its row of the route table: POST
// /v1/secret-scanning/github, no API key, the body capped by the section.
// Leaked keys are acted on through keyops, the one place for key
// operations, which writes the audit log.
func (s *Server) secretScanEndpoints(ctx context.Context, deps *Deps, getenv func(string) string) ([]gateway.Endpoint, error) {
	sc := s.cfg.SecretScanning
	if !sc.Enabled {
		return nil, nil
	}
	ops, store, err := s.openOps(deps)
	if err != nil {
		return nil, err
	}
	keys, err := secretscan.NewKeys(ctx, secretscan.KeysConfig{File: sc.KeysFile, URL: sc.KeysURL, MinRefresh: sc.KeysRefresh})
	if err != nil {
		return nil, fieldpath.Within("secret_scanning", err)
	}
	cfg := secretscan.Config{
		Keys: keys, Lookup: s.store, Reporter: ops, Policy: sc.Policy.Map(), QuarantineGrace: sc.QuarantineGrace,
		Logger: s.log, Registerer: s.registry, MaxBodyBytes: sc.MaxBodyBytes, MaxMatches: sc.MaxMatches, ReplayWindow: sc.ReplayWindow,
	}
	// Leaked admin tokens are revoked whatever the policy.
	svc, err := admintoken.New(admintoken.Config{Store: store, Auditor: deps.Auditor})
	if err != nil {
		return nil, err
	}
	cfg.AdminTokens, cfg.RevokeAdminToken = store, svc
	if sc.Webhook.URL != "" {
		wh, err := secretscan.NewWebhook(secretscan.WebhookConfig{URL: sc.Webhook.URL, Secret: []byte(getenv(sc.Webhook.SecretEnv)),
			Attempts: sc.Webhook.Attempts, Backoff: sc.Webhook.Backoff, Logger: s.log})
		if err != nil {
			return nil, fieldpath.Within("secret_scanning.webhook", err)
		}
		s.onClose(wh.Close)
		cfg.Notifier = wh
	}
	h, err := secretscan.New(cfg)
	if err != nil {
		return nil, fieldpath.Within("secret_scanning", err)
	}
	return []gateway.Endpoint{{Path: secretscan.Path, Methods: []string{http.MethodPost}, Form: true, MaxBodyBytes: h.MaxBodyBytes(), Handler: h}}, nil
}
