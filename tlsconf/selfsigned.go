package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/keygate/keygate/internal/atomicfile"
	"github.com/keygate/keygate/internal/fieldpath"

	"go.uber.org/zap"
)

const (
	selfSignedLifetime = 365 * 24 * time.Hour
	// A stored certificate this close to expiry is replaced at start.
	selfSignedRenewBefore = 30 * 24 * time.Hour
)

// selfSignedNames returns the DNS names and IPs the certificate must cover.
func selfSignedNames(extra []string) (dns []string, ips []net.IP) {
	dns = []string{"localhost"}
	ips = []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
	for _, n := range extra {
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				if v4 := ip.To4(); v4 != nil {
					ip = v4
				}
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dns, n) {
			dns = append(dns, n)
		}
	}
	return dns, ips
}

func (m *Manager) startSelfSigned(cfg Config) error {
	dir := cfg.SelfSignedDir
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	dns, ips := selfSignedNames(cfg.Names)

	if cert, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		if why := unusable(cert.Leaf, dns, ips, time.Now()); why == "" {
			m.logger.Info("tls: using the stored self-signed certificate", zap.String("cert", certPath), zap.Time("not_after", cert.Leaf.NotAfter))
			m.cert.Store(&cert)
			m.base.GetCertificate = m.getStatic
			return nil
		} else {
			m.logger.Info("tls: replacing the stored self-signed certificate", zap.String("reason", why))
		}
	} else if !os.IsNotExist(err) {
		m.logger.Warn("tls: stored self-signed certificate unreadable; making a new one", zap.Error(err))
	}

	certPEM, keyPEM, err := makeSelfSigned(dns, ips, time.Now())
	if err != nil {
		return fieldpath.Errorf("self_signed_dir", "%w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fieldpath.Errorf("self_signed_dir", "%w", err)
	}
	if err := atomicfile.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fieldpath.Errorf("self_signed_dir", "%w", err)
	}
	if err := atomicfile.WriteFile(certPath, certPEM, 0o644); err != nil {
		return fieldpath.Errorf("self_signed_dir", "%w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("tlsconf: generated pair does not load: %w", err)
	}
	m.logger.Info("tls: generated a self-signed certificate", zap.String("cert", certPath), zap.Strings("dns", dns), zap.Time("not_after", cert.Leaf.NotAfter))
	m.cert.Store(&cert)
	m.base.GetCertificate = m.getStatic
	return nil
}

// unusable says why leaf cannot be served for the names at now, or "".
func unusable(leaf *x509.Certificate, dns []string, ips []net.IP, now time.Time) string {
	if leaf == nil {
		return "no leaf"
	}
	if now.Before(leaf.NotBefore) || now.Add(selfSignedRenewBefore).After(leaf.NotAfter) {
		return "expired or about to expire"
	}
	for _, n := range dns {
		if !slices.Contains(leaf.DNSNames, n) {
			return "does not cover " + n
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return "does not cover " + ip.String()
		}
	}
	return ""
}

// makeSelfSigned makes an ECDSA P-256 certificate for the names.
func makeSelfSigned(dns []string, ips []net.IP, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: dns[0], Organization: []string{"keygate self-signed"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
