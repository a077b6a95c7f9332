// Package capool loads the PEM certificate authorities that keygate's
// configuration names: the Redis server's CA (redis.tls.ca_file), the ACME
// directory's (tls.ca_root), the JWKS issuer's (auth.oauth2.ca_root), the
// admin API's client CA (admin_api.client_ca_file) and the portal's
// identity provider's (portal.oidc.ca_file). One loader, one set of
// messages; callers put the option's name in front.
package capool

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrNoCertificate means the PEM holds no certificate.
var ErrNoCertificate = errors.New("no PEM certificate")

// Load reads the PEM file at path into a new pool of its certificates
// only.
func Load(path string) (*x509.CertPool, error) {
	return load(path, false, x509.NewCertPool())
}

// LoadInline is Load, except that src may also be the PEM itself (it
// starts with "-----BEGIN").
func LoadInline(src string) (*x509.CertPool, error) {
	return load(src, true, x509.NewCertPool())
}

// WithSystem returns the system's roots and the certificates of the PEM
// file at path: for a server that may be behind a private CA or a public
// one.
func WithSystem(path string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	return load(path, false, pool)
}

func load(src string, inline bool, pool *x509.CertPool) (*x509.CertPool, error) {
	pemBytes, where := []byte(src), "the inline PEM"
	if !inline || !strings.HasPrefix(strings.TrimSpace(src), "-----BEGIN") {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		pemBytes, where = b, src
	}
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("%w in %s", ErrNoCertificate, where)
	}
	return pool, nil
}
