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
	"time"

	"github.com/keygate/keygate/product"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keystore"
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
// lines, and the gateway itself.
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

	consumer, err := demoConsumer(cfg)
	if err != nil {
		return err
	}
	key, err := issueDemoKey(cfg, consumer)
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(cfg.Server.Listen)
	scheme := "https"
	insecure := "-k "
	if cfg.TLS.Mode == "off" {
		scheme, insecure = "http", ""
	}
	base := fmt.Sprintf("%s://localhost:%s", scheme, port)
	cfg.Portal.Enabled = true
	if cfg.Portal.APIURL == "" {
		cfg.Portal.APIURL = base
	}
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

Admin: http://%s/healthz /readyz /metrics. Stop with Ctrl-C.

`, cfg.Upstreams.Extraction.Targets[0], cfg.Upstreams.Registry.Targets[0], demoContext, key,
		insecure, key, demoDocID, demoContext, base,
		insecure, key, demoDocID, otherContext, base,
		cfg.Portal.URL(), insecure, demoDocID, demoContext, base, cfg.Server.AdminListen)
	return runWith(cfg, stderr, func(d *server.Deps) { d.PortalDemoConsumer = consumer })
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
func issueDemoKey(cfg config.Config, consumer string) (string, error) {
	admin := &keystore.FileAdmin{Path: cfg.Keystore.File}
	ctx := context.Background()
	recs, err := admin.List(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range recs {
		if r.Name == demoKeyName && r.Status == keystore.Active {
			if _, err := admin.Revoke(ctx, r.ID); err != nil {
				return "", err
			}
		}
	}
	key, _, err := admin.Issue(ctx, keystore.IssueRequest{
		Product: keystore.Extraction, Env: keystore.Live, Context: demoContext, Name: demoKeyName, Consumer: consumer,
	})
	return key, err
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
