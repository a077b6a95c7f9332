package tlsconf_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/keygate/keygate/tlsconf"
)

// hello answers every request with 200 "hello".
var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "hello")
})

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func portOf(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// serveTLS serves h over TLS with the manager's config on ln (or a new
// loopback listener) and returns the port.
func serveTLS(t testing.TB, m *tlsconf.Manager, ln net.Listener, h http.Handler) int {
	t.Helper()
	if ln == nil {
		ln = listen(t)
	}
	srv := &http.Server{Handler: h, TLSConfig: m.TLSConfig(), ErrorLog: nil, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return portOf(ln)
}

// serveHTTP serves h in plain HTTP on ln.
func serveHTTP(t testing.TB, ln net.Listener, h http.Handler) {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// client returns an HTTP client that trusts roots, offers HTTP/2, and
// dials 127.0.0.1 whatever the URL's host name, as DNS would for a name
// pointing at this machine.
func client(roots *x509.CertPool, tweak func(*tls.Config)) *http.Client {
	tc := &tls.Config{RootCAs: roots}
	if tweak != nil {
		tweak(tc)
	}
	tr := &http.Transport{
		TLSClientConfig:   tc,
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		},
		DisableKeepAlives: true,
	}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// leaf handshakes with 127.0.0.1:port using SNI name and returns the served
// leaf certificate. It does not verify the chain: callers compare it.
func leaf(t testing.TB, port int, name string) (*x509.Certificate, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// pair makes an ECDSA certificate and key in PEM for name, self-signed.
func pair(t testing.TB, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}
