package tlsconf_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/keygate/keygate/internal/testsupport/pebbletest"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/tlsconf"
)

// Each test obtains its own name: certmagic keeps the challenges under way
// in a process-wide map keyed by name, so two tests solving the same name at
// once would answer each other's challenges.
func acmeConfig(p *pebbletest.Pebble, domain, storagePath string, challenges ...string) tlsconf.Config {
	cfg := tlsconf.DefaultConfig()
	cfg.Mode = tlsconf.ModeACME
	cfg.Domains = []string{domain}
	cfg.Email = "ops@keygate.test"
	cfg.CA = p.DirectoryURL
	cfg.CARoot = p.CARootFile
	cfg.Challenges = challenges
	cfg.StoragePath = storagePath
	return cfg
}

func quietLogger(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// getOK fetches https://domain:port/ trusting only Pebble's issuing root.
func getOK(p *pebbletest.Pebble, domain string, port int) (*http.Response, error) {
	resp, err := client(p.IssuerRoots, nil).Get(fmt.Sprintf("https://%s:%d/", domain, port))
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" {
		return nil, fmt.Errorf("got %d %q", resp.StatusCode, body)
	}
	return resp, nil
}

func TestACMEObtainsAndServes(t *testing.T) {
	t.Parallel()
	for _, ch := range []string{tlsconf.ChallengeHTTP01, tlsconf.ChallengeTLSALPN01} {
		t.Run(ch, func(t *testing.T) {
			t.Parallel()
			domain := ch + ".keygate.test"
			httpLn, tlsLn := listen(t), listen(t)
			p := pebbletest.Start(t, pebbletest.HTTPPort(portOf(httpLn)), pebbletest.TLSPort(portOf(tlsLn)))
			storage := t.TempDir()
			deps := tlsconf.Deps{Logger: quietLogger(t), HTTPPort: portOf(httpLn), TLSPort: portOf(tlsLn)}
			m, err := tlsconf.New(context.Background(), acmeConfig(p, domain, storage, ch), deps)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			// The plain-HTTP listener answers http-01 and 404s the rest.
			serveHTTP(t, httpLn, m.HTTPChallengeHandler(http.NotFoundHandler()))
			port := serveTLS(t, m, tlsLn, hello)

			var resp *http.Response
			testkit.Eventually(t, 90*time.Second, "a certificate from Pebble to be served", func() error {
				resp, err = getOK(p, domain, port)
				return err
			})
			if resp.Proto != "HTTP/2.0" {
				t.Errorf("proto %s, want HTTP/2.0", resp.Proto)
			}
			issued := resp.TLS.PeerCertificates[0]
			if err := issued.VerifyHostname(domain); err != nil {
				t.Error(err)
			}
			if n := p.Orders(); n != 1 {
				t.Errorf("Pebble saw %d orders, want 1", n)
			}

			// The CA goes away; a restarted keygate serves the stored
			// certificate from its first handshake, without a new order.
			p.Stop()
			_ = m.Close()
			m2, err := tlsconf.New(context.Background(), acmeConfig(p, domain, storage, ch), tlsconf.Deps{Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			resp2, err := getOK(p, domain, serveTLS(t, m2, nil, hello))
			if err != nil {
				t.Fatalf("restart with the CA down: %v", err)
			}
			if resp2.TLS.PeerCertificates[0].SerialNumber.Cmp(issued.SerialNumber) != 0 {
				t.Error("restart served a different certificate")
			}
		})
	}
}

func TestACMEThreeReplicasShareOneOrderThroughRedis(t *testing.T) {
	t.Parallel()
	const domain = "replicas.keygate.test"
	rds := redistest.Start(t)
	httpLn := listen(t)
	p := pebbletest.Start(t, pebbletest.HTTPPort(portOf(httpLn)))

	const replicas = 3
	managers := make([]*tlsconf.Manager, replicas)
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		rc := rds.Client(t)
		cfg := acmeConfig(p, domain, "", tlsconf.ChallengeHTTP01)
		cfg.Storage = "redis"
		wg.Add(1)
		go func() {
			defer wg.Done()
			managers[i], errs[i] = tlsconf.New(context.Background(), cfg, tlsconf.Deps{
				Logger: quietLogger(t), Redis: rc, HTTPPort: portOf(httpLn),
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		defer managers[i].Close()
	}
	// One plain-HTTP port in front of all three, round robin, as a load
	// balancer would: whichever replica holds the order, any may be asked
	// for the challenge.
	var next atomic.Uint32
	handlers := make([]http.Handler, replicas)
	for i, m := range managers {
		handlers[i] = m.HTTPChallengeHandler(http.NotFoundHandler())
	}
	serveHTTP(t, httpLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers[next.Add(1)%replicas].ServeHTTP(w, r)
	}))
	ports := make([]int, replicas)
	for i, m := range managers {
		ports[i] = serveTLS(t, m, nil, hello)
	}

	serials := make([]string, replicas)
	for i, port := range ports {
		testkit.Eventually(t, 120*time.Second, fmt.Sprintf("replica %d to serve a certificate", i), func() error {
			resp, err := getOK(p, domain, port)
			if err != nil {
				return err
			}
			serials[i] = resp.TLS.PeerCertificates[0].SerialNumber.String()
			return nil
		})
	}
	if serials[0] != serials[1] || serials[1] != serials[2] {
		t.Errorf("replicas serve different certificates: %v", serials)
	}
	if n := p.Orders(); n != 1 {
		t.Errorf("Pebble saw %d orders from three replicas, want exactly 1", n)
	}
}

func TestACMEOnDemandOnlyForAllowedNames(t *testing.T) {
	t.Parallel()
	const domain = "ondemand.keygate.test"
	httpLn := listen(t)
	p := pebbletest.Start(t, pebbletest.HTTPPort(portOf(httpLn)))
	cfg := acmeConfig(p, domain, t.TempDir(), tlsconf.ChallengeHTTP01)
	cfg.Domains = nil
	cfg.OnDemand = tlsconf.OnDemandConfig{Enabled: true, Allow: []string{domain}}
	m, err := tlsconf.New(context.Background(), cfg, tlsconf.Deps{Logger: quietLogger(t), HTTPPort: portOf(httpLn)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	serveHTTP(t, httpLn, m.HTTPChallengeHandler(http.NotFoundHandler()))
	port := serveTLS(t, m, nil, hello)

	for _, name := range []string{"random.test", "other.ondemand.keygate.test"} {
		if _, err := leaf(t, port, name); err == nil {
			t.Errorf("handshake for %s succeeded; it is not allowed", name)
		}
	}
	if n := p.Orders(); n != 0 {
		t.Fatalf("names outside on_demand.allow placed %d orders", n)
	}
	// The allowed name gets its certificate during its first handshake.
	resp, err := getOK(p, domain, port)
	if err != nil {
		t.Fatalf("on-demand for an allowed name: %v", err)
	}
	if err := resp.TLS.PeerCertificates[0].VerifyHostname(domain); err != nil {
		t.Error(err)
	}
	if n := p.Orders(); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
}

func TestACMENeedsRedisClientForRedisStorage(t *testing.T) {
	t.Parallel()
	cfg := tlsconf.DefaultConfig()
	cfg.Mode, cfg.Domains, cfg.Storage = tlsconf.ModeACME, []string{"keygate.test"}, "redis"
	if _, err := tlsconf.New(context.Background(), cfg, tlsconf.Deps{}); err == nil {
		t.Error("redis storage without a client accepted")
	}
	cfg.Storage, cfg.StoragePath, cfg.CARoot = "file", t.TempDir(), "/nonexistent/ca.pem"
	if _, err := tlsconf.New(context.Background(), cfg, tlsconf.Deps{}); err == nil {
		t.Error("unreadable tls.ca_root accepted")
	}
}
