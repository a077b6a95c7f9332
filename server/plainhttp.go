package server

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/tlsconf"
)

// redirectHosts are the host names the plain-HTTP listener may redirect
// to, the first being where any other Host is sent: the TLS names of the
// configuration (tls.domains in acme mode, tls.on_demand.allow without
// wildcards, tls.names and the names every self-signed certificate has
// in self_signed mode, the certificate's DNS names and addresses in files
// mode) and the host of auth.token_endpoint.issuer. A client's Host
// header is never one of them unless the configuration says so.
func redirectHosts(cfg config.Config) []string {
	var names []string
	add := func(n string) {
		n = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(n)), ".")
		if n == "" || strings.ContainsAny(n, "*/ ") {
			return
		}
		if h, _, err := net.SplitHostPort(n); err == nil {
			n = h
		}
		for _, have := range names {
			if have == n {
				return
			}
		}
		names = append(names, n)
	}
	t := cfg.TLS
	for _, n := range t.Domains {
		add(n)
	}
	for _, n := range t.Names {
		add(n)
	}
	if t.Mode == tlsconf.ModeSelfSigned {
		// The self-signed certificate always names these too.
		for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
			add(n)
		}
	}
	if t.Mode == tlsconf.ModeFiles {
		for _, n := range certDNSNames(t.CertFile) {
			add(n)
		}
	}
	for _, n := range t.OnDemand.Allow {
		add(n)
	}
	if iss := cfg.Auth.TokenEndpoint.Issuer; cfg.Auth.TokenEndpoint.Enabled && iss != "" {
		if u, err := url.Parse(iss); err == nil {
			add(u.Hostname())
		}
	}
	return names
}

// certDNSNames reads the DNS names and IP addresses of the first certificate in a PEM file
// (the leaf); none when it cannot be read (the TLS listener reports that).
func certDNSNames(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil
	}
	names := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return names
}
