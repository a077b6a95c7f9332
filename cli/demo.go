package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/keygate/keygate/product"

	"github.com/keygate/keygate/adminapi"
	"github.com/keygate/keygate/admintoken"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/server"
	"github.com/keygate/keygate/standin"
)

// The demo's fixed contexts, so the printed curl lines stay the same.
const (
	demoContext  = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"
	otherContext = "0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d"
	demoDocID    = "2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a"
	demoKeyName  = "demo (make run)"
	// demoConsumerName is the demo's customer: the demo key is its, and
	// the portal's development sign-in signs in as it.
	demoConsumerName = "Demo customer (make run)"
)

// demo is `make run`: stand-in backends on the configured upstream
// addresses, a fresh demo key bound to a demo context, two ready curl
// lines, the portal with its development sign-in, the admin API on
// loopback with a demo admin token (and its curl line), the plans the
// docs' examples use, and the gateway itself, its request lines going to access.log
// next to the keystore so that the terminal keeps the banner.
func demo(args []string, stdout, stderr io.Writer) error {
	cfg, err := configFlag("demo", args, stderr)
	if err != nil {
		return err
	}
	if cfg.Keystore.Backend != "file" {
		return errors.New("demo: runs with the file keystore only")
	}
	for _, b := range []struct {
		name    string
		targets []string
	}{{product.Extraction, cfg.Upstreams.Extraction.Targets}, {product.Registry, cfg.Upstreams.Registry.Targets}} {
		u, err := url.Parse(b.targets[0])
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", u.Host)
		if err != nil {
			return fmt.Errorf("demo: cannot start the %s stand-in on %s: %w", b.name, u.Host, err)
		}
		srv := &http.Server{Handler: standin.Handler{Name: b.name}, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}

	demoConfig(&cfg)
	consumer, err := demoConsumer(cfg)
	if err != nil {
		return err
	}
	key, keyID, err := issueDemoKey(cfg, consumer)
	if err != nil {
		return err
	}
	adminToken, revokeToken, err := demoAdminToken(cfg)
	if err != nil {
		return err
	}
	defer revokeToken()
	accessPath := filepath.Join(filepath.Dir(cfg.Keystore.File), "access.log")
	access, err := os.OpenFile(accessPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("demo: the access log: %w", err)
	}
	defer access.Close()
	_, port, _ := net.SplitHostPort(cfg.Server.Listen)
	scheme := "https"
	insecure := "-k "
	if cfg.TLS.Mode == "off" {
		scheme, insecure = "http", ""
	}
	base := fmt.Sprintf("%s://localhost:%s", scheme, port)
	if !cfg.Auth.TokenEndpoint.Enabled {
		// The token endpoint, so that the banner can show the exchange.
		cfg.Auth.TokenEndpoint.Enabled = true
		cfg.Auth.TokenEndpoint.Issuer = "https://localhost:" + port
	}
	cfg.Portal.Enabled = true
	if cfg.Portal.APIURL == "" {
		cfg.Portal.APIURL = base
	}
	adminScheme, adminInsecure := "https", "-k "
	if cfg.AdminAPI.TLS == adminapi.TLSOff {
		adminScheme, adminInsecure = "http", ""
	}
	adminHost, adminPort, _ := net.SplitHostPort(cfg.AdminAPI.Listen)
	if ip := net.ParseIP(adminHost); adminHost == "" || ip != nil && ip.IsUnspecified() {
		adminHost = "127.0.0.1"
	}
	adminURL := adminScheme + "://" + net.JoinHostPort(adminHost, adminPort)
	fmt.Fprintf(stdout, `
keygate demo: stand-in backends on %s and %s
Demo key (extraction, live, bound to context %s):

  %s

This request gets 200 (the stand-in echoes what it received):

  curl %s-H 'x-api-key: %s' -F files=@README.md -F id=%s -F contextId=%s %s/sync

This one uses another context and gets 403 Invalid Context:

  curl %s-H 'x-api-key: %s' -F files=@README.md -F id=%s -F contextId=%s %s/sync

Self-service portal: %s
  Open it (accept the self-signed certificate) and press "Sign in as the demo
  user": a development sign-in that exists only in demo mode. Create a key
  there, then use it:

  KEY='the key the portal showed'
  curl %s-H "x-api-key: $KEY" -F files=@README.md -F id=%s -F contextId=%s %s/sync

Admin API: %s, with a demo admin token that has every scope
and is revoked when the demo stops. This lists the consumers:

  curl %s-sS -H 'Authorization: Bearer %s' %s/v1/consumers

The README's admin API examples use these two variables; paste them first:

  TOKEN=%s API=%s

OAuth 2.0: exchange the demo key for a %s access token (client_credentials,
client_id = the key's id, client_secret = the key):

  ACCESS_TOKEN=$(curl %s-sS -u '%s:%s' -d grant_type=client_credentials %s/oauth2/token | jq -r .access_token)

and call /sync with the token instead of the key (200):

  curl %s-H "Authorization: Bearer $ACCESS_TOKEN" -F files=@README.md -F id=%s -F contextId=%s %s/sync

Access log: %s (one JSON line per request: tail -f %s).
Health and metrics: http://%s/healthz /readyz /metrics. Stop with Ctrl-C.

`, cfg.Upstreams.Extraction.Targets[0], cfg.Upstreams.Registry.Targets[0], demoContext, key,
		insecure, key, demoDocID, demoContext, base,
		insecure, key, demoDocID, otherContext, base,
		cfg.Portal.URL(), insecure, demoDocID, demoContext, base,
		adminURL, adminInsecure, adminToken, adminURL, adminToken, adminURL,
		cfg.Auth.TokenEndpoint.TTL, insecure, keyID, key, base, insecure, demoDocID, demoContext, base,
		accessPath, accessPath, cfg.Server.AdminListen)
	return runWith(cfg, stderr, access, func(d *server.Deps) { d.PortalDemoConsumer = consumer })
}

// demoPlans are the plans the demo adds when its config has none of the
// name, so that the docs' examples (`"plan":"pro"`, `--plan team`) work
// on `make run` as written.
var demoPlans = map[string]policy.Plan{
	"pro": {Limit: policy.Limit{Rate: 200, Per: time.Second, Burst: 400,
		Quota: policy.Quota{Requests: 50000, Per: 24 * time.Hour}}},
	"team": {Limit: policy.Limit{Rate: 50, Per: time.Second, Burst: 100,
		Quota: policy.Quota{Requests: 100000, Per: 24 * time.Hour}}, Scope: policy.ScopeConsumer},
}

// demoConfig is what the demo adds to its config: the docs' plans,
// and the admin API on loopback (plain HTTP) unless the config enables
// it already.
func demoConfig(cfg *config.Config) {
	if cfg.RateLimit.Plans == nil {
		cfg.RateLimit.Plans = map[string]policy.Plan{}
	}
	for name, p := range demoPlans {
		if _, ok := cfg.RateLimit.Plans[name]; !ok {
			cfg.RateLimit.Plans[name] = p
		}
	}
	if !cfg.AdminAPI.Enabled {
		cfg.AdminAPI.Enabled = true
		cfg.AdminAPI.TLS = adminapi.TLSOff
		if host, _, err := net.SplitHostPort(cfg.AdminAPI.Listen); err != nil || !isLoopback(host) {
			cfg.AdminAPI.Listen = adminapi.DefaultConfig().Listen
		}
	}
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// demoAdminTokenName names the demo's admin token, so that the next run
// revokes it if this one did not stop cleanly.
const demoAdminTokenName = "demo (make run)"

// demoAdminToken revokes the admin tokens of earlier demo runs and
// creates one with every scope, through the audited admin-token service;
// the returned function revokes it.
func demoAdminToken(cfg config.Config) (string, func(), error) {
	ts := &keystore.FileAdmin{Path: cfg.Keystore.File}
	log, err := openAudit(cfg, ts)
	if err != nil {
		return "", nil, err
	}
	svc, err := admintoken.New(admintoken.Config{Store: ts, Auditor: log})
	if err != nil {
		_ = log.Close()
		return "", nil, err
	}
	ctx := context.Background()
	list, err := svc.List(ctx)
	if err != nil {
		_ = log.Close()
		return "", nil, err
	}
	now := time.Now()
	for _, t := range list {
		if t.Name == demoAdminTokenName && t.StateAt(now) == keystore.Active {
			if _, err := svc.Revoke(ctx, Actor(), t.ID); err != nil {
				_ = log.Close()
				return "", nil, err
			}
		}
	}
	tok, t, err := svc.Create(ctx, Actor(), admintoken.CreateRequest{Name: demoAdminTokenName, Scopes: admintoken.Scopes})
	if err != nil {
		_ = log.Close()
		return "", nil, err
	}
	return tok, func() {
		_, _ = svc.Revoke(context.Background(), Actor(), t.ID)
		_ = log.Close()
	}, nil
}

// demoConsumer returns the demo customer's id, creating it on the first
// run: it may bind keys to the demo context only.
func demoConsumer(cfg config.Config) (string, error) {
	admin := &keystore.FileAdmin{Path: cfg.Keystore.File}
	ctx := context.Background()
	cons, err := admin.ListConsumers(ctx)
	if err != nil {
		return "", err
	}
	for _, c := range cons {
		if c.Name == demoConsumerName {
			return c.ID, nil
		}
	}
	c, err := keystore.NewConsumer(keystore.Consumer{Name: demoConsumerName, Contexts: []string{demoContext}}, time.Now())
	if err != nil {
		return "", err
	}
	return c.ID, admin.CreateConsumer(ctx, c)
}

// issueDemoKey revokes the keys of earlier demo runs and issues a new one
// for the demo customer.
func issueDemoKey(cfg config.Config, consumer string) (key, id string, err error) {
	admin := &keystore.FileAdmin{Path: cfg.Keystore.File}
	ctx := context.Background()
	recs, err := admin.List(ctx)
	if err != nil {
		return "", "", err
	}
	for _, r := range recs {
		if r.Name == demoKeyName && r.Status == keystore.Active {
			if _, err := admin.Revoke(ctx, r.ID); err != nil {
				return "", "", err
			}
		}
	}
	key, rec, err := admin.Issue(ctx, keystore.IssueRequest{
		Product: keystore.Extraction, Env: keystore.Live, Context: demoContext, Name: demoKeyName, Consumer: consumer,
	})
	return key, rec.ID, err
}

// runStandin runs one stand-in backend until interrupted (used by deploy/).
func runStandin(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9001", "address to listen on")
	name := fs.String("name", product.Extraction, "backend name reported in answers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, Handler: standin.Handler{Name: *name}, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "stand-in %s backend on %s\n", *name, *listen)
	return srv.ListenAndServe()
}
