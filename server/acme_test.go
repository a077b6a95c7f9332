package server_test

import (
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/pebbletest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestACMEThroughTheGateway runs keygate in acme mode against Pebble, a
// real ACME server on loopback, once per challenge type: the challenge is
// answered by keygate's own listeners (http-01 on server.http_listen,
// tls-alpn-01 on the API listener), and a client that trusts only Pebble's
// root then completes a /sync.
func TestACMEThroughTheGateway(t *testing.T) {
	t.Parallel()
	for _, ch := range []string{"http-01", "tls-alpn-01"} {
		t.Run(ch, func(t *testing.T) {
			t.Parallel()
			// certmagic keeps challenges in a process-wide map by name: one
			// name per test.
			domain := ch + ".server.keygate.test"
			apiAddr, plainAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
			p := pebbletest.Start(t, pebbletest.HTTPPort(portOf(t, plainAddr)), pebbletest.TLSPort(portOf(t, apiAddr)))
			h := newHarness(t, setup{roots: p.IssuerRoots, serverName: domain, mod: func(c *config.Config) {
				c.Server.Listen, c.Server.HTTPListen = apiAddr, plainAddr
				c.TLS.Mode = "acme"
				c.TLS.Domains = []string{domain}
				c.TLS.Email = "ops@keygate.test"
				c.TLS.CA, c.TLS.CARoot = p.DirectoryURL, p.CARootFile
				c.TLS.Challenges = []string{ch}
			}})

			testkit.Eventually(t, 60*time.Second, "a certificate from Pebble", func() error {
				c, err := tls.Dial("tcp", apiAddr, &tls.Config{RootCAs: p.IssuerRoots, ServerName: domain})
				if err != nil {
					return err
				}
				return c.Close()
			})
			if p.Orders() < 1 {
				t.Errorf("Pebble accepted %d orders", p.Orders())
			}
			r, sent := h.syncTo(h.API, keyCred(h.LiveKey), ctxA)
			if r.Status != 200 {
				t.Fatalf("sync: %d %s", r.Status, r.Body)
			}
			if r.Echo.SHA256 != sha(sent) || r.Echo.Bytes != int64(len(sent)) {
				t.Errorf("upstream got %d bytes sha256 %s, sent %d bytes sha256 %s", r.Echo.Bytes, r.Echo.SHA256, len(sent), sha(sent))
			}
			if r.Proto != 2 || r.Header.Get("Strict-Transport-Security") == "" {
				t.Errorf("HTTP/%d, Strict-Transport-Security %q", r.Proto, r.Header.Get("Strict-Transport-Security"))
			}
		})
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
