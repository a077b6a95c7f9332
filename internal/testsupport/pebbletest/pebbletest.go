// Package pebbletest runs Let's Encrypt's Pebble ACME test server in-process
// on loopback for tests: its web front end (WFE) over HTTPS with a CA made
// for the test, its certificate authority, its validation authority (VA)
// and a mock DNS server (challtestsrv) that answers 127.0.0.1 for every
// name, so any test domain (for example "keygate.test") validates against
// challenge servers on this machine. Nothing leaves 127.0.0.1.
//
// Typical use:
//
//	httpLn, _ := net.Listen("tcp", "127.0.0.1:0")   // serves http-01
//	tlsLn, _ := net.Listen("tcp", "127.0.0.1:0")    // serves HTTPS + tls-alpn-01
//	p := pebbletest.Start(t, pebbletest.HTTPPort(port(httpLn)), pebbletest.TLSPort(port(tlsLn)))
//	cfg.CA, cfg.CARoot = p.DirectoryURL, p.CARootFile
//	... after the certificate is served:
//	tls.Config{RootCAs: p.IssuerRoots, ServerName: "keygate.test"}
package pebbletest

import (
	"crypto/tls"
	"crypto/x509"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/statuswriter"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/letsencrypt/challtestsrv"
	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
)

// Pebble is one running Pebble. Its fields are set by Start and must not
// be changed; its methods are safe for concurrent use.
type Pebble struct {
	// DirectoryURL is the ACME directory (https://127.0.0.1:PORT/dir); use
	// it as tls.ca.
	DirectoryURL string
	// CARootFile is a PEM file with the CA that signed the WFE's HTTPS
	// certificate; use it as tls.ca_root. CARoots is the same as a pool.
	CARootFile string
	CARoots    *x509.CertPool
	// IssuerRootPEM is Pebble's issuing root: clients that should trust
	// certificates obtained from this Pebble use IssuerRoots.
	IssuerRootPEM []byte
	IssuerRoots   *x509.CertPool
	// ManagementURL serves Pebble's management API (/roots/0,
	// /intermediates/0, ...), over HTTPS trusted by CARoots.
	ManagementURL string
	// DNSAddr is the mock DNS server the VA resolves names with; it answers
	// A 127.0.0.1 for every name and no AAAA.
	DNSAddr string
	// DNS is the mock DNS server, to add records a test needs.
	DNS *challtestsrv.ChallSrv
	// HTTPPort and TLSPort are where the VA connects for http-01 and
	// tls-alpn-01 challenges.
	HTTPPort, TLSPort int

	orders  atomic.Int64
	wfe     *httptest.Server
	mgmt    *httptest.Server
	logs    *testkit.SyncBuffer
	stopped atomic.Bool
}

type options struct {
	httpPort, tlsPort int
	profileValidity   time.Duration
}

// Option changes how Start sets Pebble up.
type Option func(*options)

// HTTPPort sets the port the VA connects to for http-01 (default 5002,
// which is likely closed: set it when a test uses http-01).
func HTTPPort(p int) Option { return func(o *options) { o.httpPort = p } }

// TLSPort sets the port the VA connects to for tls-alpn-01 (default 5001,
// likely closed: set it when a test uses tls-alpn-01).
func TLSPort(p int) Option { return func(o *options) { o.tlsPort = p } }

// Validity sets the lifetime of the certificates Pebble issues (default
// Pebble's own, about five years).
func Validity(d time.Duration) Option { return func(o *options) { o.profileValidity = d } }

// envMu serialises the few lines where Pebble's constructors read their
// settings from the environment.
var envMu sync.Mutex

// pebbleEnv are the settings that make Pebble fast and deterministic: no
// random VA sleeps, no injected bad nonces, no authorization reuse (so every
// order validates again).
var pebbleEnv = map[string]string{
	"PEBBLE_VA_NOSLEEP":      "1",
	"PEBBLE_WFE_NONCEREJECT": "0",
	"PEBBLE_AUTHZREUSE":      "0",
	"PEBBLE_VA_ALWAYS_VALID": "0",
}

// Start runs Pebble on 127.0.0.1 and stops it when the test ends. Pebble's
// log is printed if the test fails.
func Start(t testing.TB, opts ...Option) *Pebble {
	t.Helper()
	o := options{httpPort: 5002, tlsPort: 5001}
	for _, fn := range opts {
		fn(&o)
	}
	p := &Pebble{HTTPPort: o.httpPort, TLSPort: o.tlsPort, logs: &testkit.SyncBuffer{}}
	logger := log.New(p.logs, "pebble ", log.Lmicroseconds)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Pebble log:\n%s", p.logs.String())
		}
	})

	// Mock DNS on loopback: every name is 127.0.0.1, and no AAAA (the VA
	// would otherwise try ::1 first).
	p.DNSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(testkit.FreePort(t)))
	dns, err := challtestsrv.New(challtestsrv.Config{DNSAddrs: []string{p.DNSAddr}, Log: log.New(p.logs, "dns ", log.Lmicroseconds)})
	if err != nil {
		t.Fatalf("pebbletest: mock DNS: %v", err)
	}
	dns.SetDefaultDNSIPv4("127.0.0.1")
	dns.SetDefaultDNSIPv6("")
	dns.Run()
	t.Cleanup(dns.Shutdown)
	p.DNS = dns
	waitTCP(t, p.DNSAddr)

	profiles := map[string]ca.Profile{"default": {Description: "default", ValidityPeriod: uint64(o.profileValidity / time.Second)}}
	store := db.NewMemoryStore()
	envMu.Lock()
	restore := setEnv(pebbleEnv)
	authority := ca.New(logger, store, "", "ecdsa", 0, 1, profiles)
	validator := va.New(logger, o.httpPort, o.tlsPort, false, p.DNSAddr, store)
	front := wfe.New(logger, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	restore()
	envMu.Unlock()

	p.IssuerRootPEM = authority.GetRootCert(0).PEM()
	p.IssuerRoots = x509.NewCertPool()
	if !p.IssuerRoots.AppendCertsFromPEM(p.IssuerRootPEM) {
		t.Fatal("pebbletest: Pebble's root does not parse")
	}

	// The WFE's own HTTPS certificate, from a CA made for this test.
	caPEM, serverCert := makeServingCert(t)
	p.CARootFile = filepath.Join(t.TempDir(), "pebble-wfe-ca.pem")
	if err := os.WriteFile(p.CARootFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p.CARoots = x509.NewCertPool()
	p.CARoots.AppendCertsFromPEM(caPEM)

	handler := front.Handler()
	counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/order-plz" {
			sw := statuswriter.Wrap(w)
			handler.ServeHTTP(sw, r)
			if sw.Status() == http.StatusCreated {
				p.orders.Add(1)
			}
			return
		}
		handler.ServeHTTP(w, r)
	})
	p.wfe = startTLS(counting, serverCert)
	p.mgmt = startTLS(front.ManagementHandler(), serverCert)
	t.Cleanup(p.Stop)
	p.DirectoryURL = p.wfe.URL + wfe.DirectoryPath
	p.ManagementURL = p.mgmt.URL
	return p
}

// Orders returns how many new orders Pebble has accepted (201 answers to
// POST /order-plz).
func (p *Pebble) Orders() int64 { return p.orders.Load() }

// Stop shuts the ACME and management servers down (as a CA outage would);
// Start registers it as a cleanup too. Calling it twice is harmless.
func (p *Pebble) Stop() {
	if p.stopped.Swap(true) {
		return
	}
	p.wfe.CloseClientConnections()
	p.wfe.Close()
	p.mgmt.CloseClientConnections()
	p.mgmt.Close()
}

// Log returns what Pebble has logged so far.
func (p *Pebble) Log() string { return p.logs.String() }

func startTLS(h http.Handler, cert tls.Certificate) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	s.StartTLS()
	return s
}

func setEnv(vals map[string]string) (restore func()) {
	old := make(map[string]*string, len(vals))
	for k, v := range vals {
		if prev, ok := os.LookupEnv(k); ok {
			old[k] = &prev
		} else {
			old[k] = nil
		}
		_ = os.Setenv(k, v)
	}
	return func() {
		for k, v := range old {
			if v == nil {
				_ = os.Unsetenv(k)
			} else {
				_ = os.Setenv(k, *v)
			}
		}
	}
}

func waitTCP(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebbletest: %s never answered: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// makeServingCert makes a CA and a certificate it signs for 127.0.0.1,
// ::1 and localhost, for Pebble's own HTTPS listener.
func makeServingCert(t testing.TB) (caPEM []byte, cert tls.Certificate) {
	t.Helper()
	ca := testkit.NewCA(t, "pebbletest WFE CA")
	return ca.PEM, ca.TLSLeaf(t, 2)
}
