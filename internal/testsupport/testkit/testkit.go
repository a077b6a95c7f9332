// Package testkit holds what keygate's tests share: a log buffer that is
// safe for concurrent writers, free loopback ports, polling for a condition,
// the spec's error-body assertion, and a throwaway certificate authority.
// It is for tests only; nothing in it talks to anything but loopback.
package testkit

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"mime/multipart"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/freeport"
)

// SyncBuffer collects output (a process's, a logger's) while it is being
// written. The zero value is ready; it is safe for concurrent use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreePort returns a loopback TCP port that was free a moment ago, below
// the kernel's ephemeral range, and that no earlier call in this process
// returned (see freeport.Loopback).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FreeAddr is FreePort as "127.0.0.1:port".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// HangCheck is the deadline of a wait for something that takes
// milliseconds: far beyond what it takes on a loaded machine, so that
// reaching it means the thing hangs, not that the machine is busy.
const HangCheck = 30 * time.Second

// Eventually polls cond until it holds, failing the test if it still does
// not after within, and logs how long the wait took. It is a hang check,
// not a speed measurement: within should be generous (HangCheck for
// something that takes milliseconds).
func Eventually(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		err := cond()
		if err == nil {
			t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v (hang check): %s: last: %v", within, what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Equal is nil when got is want, else an error saying both: for
// Eventually's conditions.
func Equal[T comparable](got, want T) error {
	if got == want {
		return nil
	}
	return fmt.Errorf("got %v, want %v", got, want)
}

// True is nil when ok, else an error with the message: for Eventually's
// conditions.
func True(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

var traceID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// AssertSpecError checks an error response against the spec: the status,
// Content-Type application/json, a body of exactly
// {"StateText":"ERROR","TraceId":…,"Messages":[…]} whose TraceId is 32 hex
// digits and equals X-Trace-Id, and Messages mentioning msgHas (any case;
// "" for any message).
func AssertSpecError(t testing.TB, status int, h http.Header, body []byte, wantStatus int, msgHas string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status = %d, want %d; body %s", status, wantStatus, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var e struct {
		StateText string
		TraceId   string
		Messages  []string
	}
	_ = json.Unmarshal(body, &e)
	if e.StateText != "ERROR" || len(e.Messages) == 0 {
		t.Errorf("body = %s", body)
	}
	if !traceID.MatchString(e.TraceId) || h.Get("X-Trace-Id") != e.TraceId {
		t.Errorf("TraceId %q, X-Trace-Id %q", e.TraceId, h.Get("X-Trace-Id"))
	}
	if msgHas != "" && !strings.Contains(strings.ToLower(strings.Join(e.Messages, " ")), strings.ToLower(msgHas)) {
		t.Errorf("messages %q do not mention %q", e.Messages, msgHas)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil || len(raw) != 3 {
		t.Errorf("body is not exactly {StateText, TraceId, Messages}: %s", body)
	}
}

// CA is a throwaway certificate authority for tests.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate, for files and ca_root options.
	PEM []byte
	// Pool trusts the CA alone.
	Pool *x509.CertPool
}

// NewCA makes a CA valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	der, key := issue(t, nil, &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Pool: pool}
}

// issue makes a P-256 key and a certificate for it from tmpl, valid from
// an hour ago, signed by parent (self-signed when parent is nil).
func issue(t testing.TB, parent *CA, tmpl *x509.Certificate) (der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	issuer, signer := tmpl, key
	if parent != nil {
		issuer, signer = parent.Cert, parent.Key
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// Leaf issues a server certificate for localhost, 127.0.0.1 and ::1 with
// the given serial, as PEM (chain: leaf then CA) and PEM key.
func (ca *CA) Leaf(t testing.TB, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	der, key := issue(t, ca, &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	})
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca.PEM...)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TLSLeaf is Leaf as a tls.Certificate, for a test server.
func (ca *CA) TLSLeaf(t testing.TB, serial int64) tls.Certificate {
	t.Helper()
	c, k := ca.Leaf(t, serial)
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// ClientCert issues a client certificate (for mTLS) with common name cn,
// valid for an hour around now.
func (ca *CA) ClientCert(t testing.TB, cn string) tls.Certificate {
	t.Helper()
	der, key := issue(t, ca, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"Ops"}},
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Part is one field of a multipart form that Form builds.
type Part struct{ Name, Value string }

// Form builds a multipart/form-data body of parts, in order, and returns
// its Content-Type and bytes. A part named "files" is a file part
// (doc.pdf, application/octet-stream) holding Value.
func Form(t testing.TB, parts ...Part) (contentType string, body []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		if p.Name == "files" {
			w, err := mw.CreateFormFile("files", "doc.pdf")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = w.Write([]byte(p.Value))
			continue
		}
		if err := mw.WriteField(p.Name, p.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.Bytes()
}

// Metric sums the samples of metric name on the Prometheus text page at
// url whose labels include every name, value pair in labels.
func Metric(t testing.TB, url, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var want []string
	for i := 0; i+1 < len(labels); i += 2 {
		want = append(want, labels[i]+`="`+labels[i+1]+`"`)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// Clock is a settable clock, safe for concurrent use, for code that takes
// a Now func.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Stacks is every goroutine's stack, as runtime.Stack writes them all.
func Stacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}
