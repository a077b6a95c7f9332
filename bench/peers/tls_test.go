package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
)

// TestSmokeTLS runs the bench in TLS smoke mode: every installed target
// (direct, bare, bare-redis, traefik-redis, nginx, nginx-lua, HAProxy, Caddy, keygate with either limiter) must
// answer the bench request with 200 over TLS 1.3 on both HTTP/1.1 and
// HTTP/2 and refuse TLS 1.2 (the readiness check, TestTLSReady), then
// carry wrk's and h2load's load without an error.
func TestSmokeTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	needTools(t, "wrk", "h2load", "nginx", "nginx-lua", "haproxy", "caddy", "traefik")
	roles := buildRoles(t)
	out, errb := runLogged(t, Options{Smoke: true, TLS: true, RoleBin: roles}, 5*time.Minute)
	wants := []string{"TLS 1.3", "ECDSA P-256", "HTTP/1.1 over TLS 1.3, closed loop: `wrk", "HTTP/2 over TLS 1.3, closed loop: `h2load -c32 -m10",
		"| direct |", "| bare |", "| bare-redis |", "| traefik-redis |", "| keygate |", "| keygate-redis |", "Open loop over TLS 1.3",
		"| nginx |", "| nginx-lua |", "| haproxy |", "| caddy |"}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "Large uploads |") {
		t.Error("TLS mode printed a large-uploads table")
	}
	noFailedRequests(t, errb)
	if !strings.Contains(errb, "closed:") {
		t.Error("no closed-loop run was made")
	}
}

// TestTLSReady: the TLS readiness probe passes a target that answers 200
// on TLS 1.3 over both protocols, and names what is wrong with one that
// falls back to HTTP/1.1, accepts TLS 1.2 or refuses the request.
func TestTLSReady(t *testing.T) {
	cert, err := makeCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(cert.certFile, cert.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cert: cert, key: "bench-key"}
	ok := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Api-Key") != "bench-key" || !bytes.Contains(body, []byte(benchContext)) {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}
	for _, tc := range []struct {
		name    string
		h2      bool
		min     uint16
		handler http.HandlerFunc
		want    string
	}{
		{"TLS 1.3, HTTP/1.1 and HTTP/2", true, tls.VersionTLS13, ok, ""},
		{"no HTTP/2", false, tls.VersionTLS13, ok, "HTTP/2: answered over HTTP/1.1"},
		{"TLS 1.2 accepted", true, tls.VersionTLS12, ok, "accepts TLS 1.2"},
		{"refuses the request", true, tls.VersionTLS13, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }, "HTTP/1.1: status 502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(tc.handler)
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tc.min}
			srv.EnableHTTP2 = tc.h2
			srv.StartTLS()
			defer srv.Close()
			body, ctype := multipartBody(64, true)
			got := b.tlsReady(srv.Listener.Addr().String(), body, ctype)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("tlsReady = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMakeCert: the bench's certificate is ECDSA P-256, valid for
// 127.0.0.1, and trusted by the pool the clients use.
func TestMakeCert(t *testing.T) {
	c, err := makeCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(c.pemFile, c.pemFile); err != nil {
		t.Errorf("the combined PEM (HAProxy's crt) does not load: %v", err)
	}
	leaf := kp.Leaf
	pub, isEC := leaf.PublicKey.(*ecdsa.PublicKey)
	if !isEC || pub.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("not valid for 127.0.0.1: %v", err)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("IP SANs %v, want [127.0.0.1]", leaf.IPAddresses)
	}
}

// TestH2Result reads h2load's summary: a 4xx, a 3xx and a request with no
// answer are all errors.
func TestH2Result(t *testing.T) {
	for _, tc := range []struct {
		name     string
		out      string
		rps      float64
		done     int64
		errs     int64
		parseErr bool
	}{
		{"all 200", "finished in 5.00s, 12351.20 req/s, 223.34KB/s\nrequests: 61756 total, 61760 started, 61756 done, 61756 succeeded, 0 failed, 0 errored, 0 timeout\nstatus codes: 61756 2xx, 0 3xx, 0 4xx, 0 5xx\n", 12351.2, 61756, 0, false},
		{"4xx", "finished in 4.73ms, 1267.96 req/s, 56.96KB/s\nrequests: 6 total, 6 started, 6 done, 0 succeeded, 6 failed, 0 errored, 0 timeout\nstatus codes: 0 2xx, 0 3xx, 6 4xx, 0 5xx\n", 1267.96, 6, 6, false},
		{"3xx", "finished in 1.00s, 10.00 req/s, 1KB/s\nrequests: 10 total, 10 started, 10 done, 10 succeeded, 0 failed, 0 errored, 0 timeout\nstatus codes: 8 2xx, 2 3xx, 0 4xx, 0 5xx\n", 10, 10, 2, false},
		{"no connection", "finished in 328us, 0.00 req/s, 0B/s\nrequests: 6 total, 0 started, 0 done, 0 succeeded, 6 failed, 6 errored, 0 timeout\nstatus codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx\n", 0, 0, 6, false},
		{"no summary", "No protocol negotiated. Supported protocols: h2\n", 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rps, done, errs, err := h2Result([]byte(tc.out))
			if (err != nil) != tc.parseErr {
				t.Fatalf("err = %v", err)
			}
			if rps != tc.rps || done != tc.done || errs != tc.errs {
				t.Errorf("got %v rps, %d done, %d errors; want %v, %d, %d", rps, done, errs, tc.rps, tc.done, tc.errs)
			}
		})
	}
}

// TestOnlySideBySideTLS: with -tls, each pair runs side by side over both
// protocols, keygate against its base, the bare proxy and Caddy (when
// installed), each row naming its size and protocol; and the TLS mode's
// tables one after another are not made.
func TestOnlySideBySideTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	needTools(t, "wrk", "h2load", "caddy")
	out, errb := runSideBySide(t, Options{TLS: true, Targets: "bare,caddy,keygate", RoleBin: buildRoles(t)}, 5*time.Minute)
	wants := []string{"over TLS 1.3", "`h2load -t1 -c16 -m10`"}
	bases := []string{"keygate-base", "bare", "caddy"}
	for _, base := range bases {
		for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
			wants = append(wants, "| keygate | "+base+" | 256 B, "+proto+" | **")
		}
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, unwanted := range []string{"HTTP/1.1 over TLS 1.3, closed loop", "Open loop", "closed:"} {
		if strings.Contains(out+errb, unwanted) {
			t.Errorf("output has %q, from a run one after another", unwanted)
		}
	}
	for _, line := range strings.Split(errb, "\n") {
		if strings.HasPrefix(line, "bench-peers: side by side") && !strings.HasSuffix(line, " 0 errors") {
			t.Errorf("a round failed requests: %s", line)
		}
	}
}

// buildRoles builds the bench's own roles (upstream, direct, bare) for a
// TLS-mode test without -race, as keygate and the peers are: the race
// detector would slow their TLS stacks tenfold, and what they serve is
// not what these tests check for races (the bench driver is).
func buildRoles(t *testing.T) string {
	t.Helper()
	root, err := benchproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	roles := filepath.Join(t.TempDir(), "peers")
	build := exec.Command("go", "build", "-trimpath", "-o", roles, "./bench/peers")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./bench/peers: %v\n%s", err, out)
	}
	return roles
}
