package tlsconf_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/tlsconf"
)

func selfSignedConfig(dir string, names ...string) tlsconf.Config {
	cfg := tlsconf.DefaultConfig()
	cfg.Mode = tlsconf.ModeSelfSigned
	cfg.SelfSignedDir = dir
	cfg.Names = names
	return cfg
}

func TestSelfSignedServesLocalhostAndIsReused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	m, err := tlsconf.New(context.Background(), selfSignedConfig(dir), tlsconf.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	port := serveTLS(t, m, nil, hello)

	certPEM, err := os.ReadFile(filepath.Join(dir, "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key.pem mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)

	resp, err := client(roots, nil).Get(fmt.Sprintf("https://localhost:%d/", port))
	if err != nil {
		t.Fatalf("a client trusting the generated certificate: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" || resp.Proto != "HTTP/2.0" {
		t.Errorf("got %d %q over %s; want 200 hello over HTTP/2.0", resp.StatusCode, body, resp.Proto)
	}
	first := resp.TLS.PeerCertificates[0]
	for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
		if err := first.VerifyHostname(h); err != nil {
			t.Errorf("leaf does not cover %s: %v", h, err)
		}
	}
	if first.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithm = %v, want ECDSA", first.PublicKeyAlgorithm)
	}

	// A restart reuses the certificate on disk...
	m2, err := tlsconf.New(context.Background(), selfSignedConfig(dir), tlsconf.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	port2 := serveTLS(t, m2, nil, hello)
	again, err := leaf(t, port2, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Raw, first.Raw) {
		t.Error("second start made a new certificate instead of reusing the stored one")
	}

	// ...unless it no longer covers the configured names.
	m3, err := tlsconf.New(context.Background(), selfSignedConfig(dir, "gw.internal", "10.1.2.3"), tlsconf.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer m3.Close()
	third, err := leaf(t, serveTLS(t, m3, nil, hello), "gw.internal")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(third.Raw, first.Raw) {
		t.Fatal("certificate not regenerated for new names")
	}
	for _, h := range []string{"gw.internal", "10.1.2.3", "localhost"} {
		if err := third.VerifyHostname(h); err != nil {
			t.Errorf("regenerated leaf does not cover %s: %v", h, err)
		}
	}
}

func TestProtocolVersionsAndSuites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m12, err := tlsconf.New(context.Background(), selfSignedConfig(dir), tlsconf.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer m12.Close()
	cfg13 := selfSignedConfig(dir)
	cfg13.MinVersion = "1.3"
	m13, err := tlsconf.New(context.Background(), cfg13, tlsconf.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer m13.Close()
	p12, p13 := serveTLS(t, m12, nil, hello), serveTLS(t, m13, nil, hello)

	cases := []struct {
		name   string
		port   int
		client func(*tls.Config)
		ok     bool
	}{
		{"TLS 1.1 client refused", p12, func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11 }, false},
		{"TLS 1.2 client with ECDHE AEAD accepted", p12, func(c *tls.Config) {
			c.MaxVersion = tls.VersionTLS12
			c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
		}, true},
		{"TLS 1.2 client with CBC only refused", p12, func(c *tls.Config) {
			c.MaxVersion = tls.VersionTLS12
			c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}
		}, false},
		{"TLS 1.3 client accepted", p12, func(c *tls.Config) { c.MinVersion = tls.VersionTLS13 }, true},
		{"min_version 1.3 refuses a TLS 1.2 client", p13, func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 }, false},
		{"min_version 1.3 accepts TLS 1.3", p13, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := client(nil, func(c *tls.Config) {
				c.InsecureSkipVerify = true
				if tc.client != nil {
					tc.client(c)
				}
			})
			resp, err := c.Get(fmt.Sprintf("https://localhost:%d/", tc.port))
			if err == nil {
				resp.Body.Close()
			}
			if (err == nil) != tc.ok {
				t.Errorf("request error = %v, want success %v", err, tc.ok)
			}
		})
	}
}

func TestTLSConfigShape(t *testing.T) {
	t.Parallel()
	m, err := tlsconf.New(context.Background(), selfSignedConfig(t.TempDir()), tlsconf.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.TLSConfig()
	if c.MinVersion != tls.VersionTLS12 || strings.Join(c.NextProtos, ",") != "h2,http/1.1" {
		t.Errorf("MinVersion %x NextProtos %v", c.MinVersion, c.NextProtos)
	}
	for _, id := range c.CipherSuites {
		name := tls.CipherSuiteName(id)
		if !strings.HasPrefix(name, "TLS_ECDHE_") || !(strings.Contains(name, "GCM") || strings.Contains(name, "CHACHA20")) {
			t.Errorf("non-ECDHE/AEAD suite %s", name)
		}
	}
	c.NextProtos = nil // a copy: changing it must not touch the manager's
	if len(m.TLSConfig().NextProtos) != 2 {
		t.Error("TLSConfig returned shared state")
	}

	off, err := tlsconf.New(context.Background(), tlsconf.Config{Mode: "off", MinVersion: "1.2", HSTS: tlsconf.HSTSConfig{Enabled: true, MaxAge: time.Hour}}, tlsconf.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if off.TLSConfig() != nil || off.HSTSHeader() != "" {
		t.Error("mode off must give no TLS config and no HSTS")
	}
	next := http.NotFoundHandler()
	if fmt.Sprintf("%p", off.HTTPChallengeHandler(next)) != fmt.Sprintf("%p", next) {
		t.Error("HTTPChallengeHandler outside acme mode must be next itself")
	}
	_ = off.Close()
}

func TestHSTSHeader(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		hsts tlsconf.HSTSConfig
		want string
	}{
		{"default one year", tlsconf.DefaultConfig().HSTS, "max-age=31536000"},
		{"disabled", tlsconf.HSTSConfig{Enabled: false, MaxAge: time.Hour}, ""},
		{"subdomains and preload", tlsconf.HSTSConfig{Enabled: true, MaxAge: 2 * 365 * 24 * time.Hour, IncludeSubdomains: true, Preload: true}, "max-age=63072000; includeSubDomains; preload"},
		{"zero max-age clears the policy", tlsconf.HSTSConfig{Enabled: true}, "max-age=0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := selfSignedConfig(t.TempDir())
			cfg.HSTS = tc.hsts
			m, err := tlsconf.New(context.Background(), cfg, tlsconf.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if got := m.HSTSHeader(); got != tc.want {
				t.Errorf("HSTSHeader() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFilesReloadOnChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "crt"), filepath.Join(dir, "key")
	write := func(certPEM, keyPEM []byte) {
		t.Helper()
		// Replace by rename, as cert-manager and editors do.
		for path, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
			tmp := path + ".new"
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
	}
	certA, keyA := pair(t, "a.example")
	write(certA, keyA)

	reloads := make(chan error, 100)
	cfg := tlsconf.DefaultConfig()
	cfg.Mode, cfg.CertFile, cfg.KeyFile = tlsconf.ModeFiles, certFile, keyFile
	m, err := tlsconf.New(context.Background(), cfg, tlsconf.Deps{
		FilePollInterval: 200 * time.Millisecond,
		OnReload:         func(err error) { reloads <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	port := serveTLS(t, m, nil, hello)
	served := func() string {
		c, err := leaf(t, port, "a.example")
		if err != nil {
			return "error: " + err.Error()
		}
		return c.Subject.CommonName
	}
	if got := served(); got != "a.example" {
		t.Fatalf("serving %q, want a.example", got)
	}

	certB, keyB := pair(t, "b.example")
	write(certB, keyB)
	testkit.Eventually(t, testkit.HangCheck, "the new certificate to be served", func() error { return testkit.Equal(served(), "b.example") })

	// A broken pair (a key that does not match) keeps the old certificate.
	for len(reloads) > 0 {
		<-reloads
	}
	_, keyC := pair(t, "c.example")
	write(certA, keyC)
	select {
	case err := <-reloads:
		if err == nil {
			t.Fatal("a mismatched pair was accepted")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the broken pair was never looked at")
	}
	if got := served(); got != "b.example" {
		t.Errorf("after a broken pair, serving %q; want the previous b.example", got)
	}
}

func TestFilesUnreadableAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := tlsconf.DefaultConfig()
	cfg.Mode, cfg.CertFile, cfg.KeyFile = tlsconf.ModeFiles, filepath.Join(dir, "missing.crt"), filepath.Join(dir, "missing.key")
	if _, err := tlsconf.New(context.Background(), cfg, tlsconf.Deps{}); err == nil || !strings.Contains(err.Error(), "cert_file") {
		t.Errorf("New with missing files = %v; want an error naming tls.cert_file", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	acme := func(f func(*tlsconf.Config)) tlsconf.Config {
		c := tlsconf.DefaultConfig()
		c.Mode = tlsconf.ModeACME
		c.Domains = []string{"api.example.com"}
		f(&c)
		return c
	}
	cases := []struct {
		name string
		cfg  tlsconf.Config
		want string // substring of the error; "" for valid
	}{
		{"defaults are valid", tlsconf.DefaultConfig(), ""},
		{"acme with a domain is valid", acme(func(*tlsconf.Config) {}), ""},
		{"unknown mode", func() tlsconf.Config { c := tlsconf.DefaultConfig(); c.Mode = "on"; return c }(), `mode: must be off, self_signed, files or acme, got "on"`},
		{"bad min_version", func() tlsconf.Config { c := tlsconf.DefaultConfig(); c.MinVersion = "1.1"; return c }(), `min_version: must be "1.2" or "1.3", got "1.1"`},
		{"files needs cert_file", func() tlsconf.Config { c := tlsconf.DefaultConfig(); c.Mode = "files"; c.KeyFile = "k"; return c }(), "cert_file: required when mode is files"},
		{"files needs key_file", func() tlsconf.Config { c := tlsconf.DefaultConfig(); c.Mode = "files"; c.CertFile = "c"; return c }(), "key_file: required when mode is files"},
		{"self_signed needs a dir", func() tlsconf.Config { c := tlsconf.DefaultConfig(); c.SelfSignedDir = ""; return c }(), "self_signed_dir: required"},
		{"self_signed bad name", func() tlsconf.Config {
			c := tlsconf.DefaultConfig()
			c.Names = []string{"ok.example", "bad name"}
			return c
		}(), "names[1]:"},
		{"acme needs domains", acme(func(c *tlsconf.Config) { c.Domains = nil }), "domains: at least one domain"},
		{"acme wildcard refused", acme(func(c *tlsconf.Config) { c.Domains = []string{"*.example.com"} }), "domains[0]:"},
		{"acme http CA refused", acme(func(c *tlsconf.Config) { c.CA = "http://ca.example/dir" }), "ca: must be an https://"},
		{"acme bad challenge", acme(func(c *tlsconf.Config) { c.Challenges = []string{"dns-01"} }), "challenges[0]: must be http-01 or tls-alpn-01"},
		{"acme no challenge", acme(func(c *tlsconf.Config) { c.Challenges = nil }), "challenges: at least one"},
		{"acme bad storage", acme(func(c *tlsconf.Config) { c.Storage = "s3" }), `storage: must be file or redis, got "s3"`},
		{"acme file storage needs a path", acme(func(c *tlsconf.Config) { c.StoragePath = "" }), "storage_path: required when storage is file"},
		{"acme bad email", acme(func(c *tlsconf.Config) { c.Email = "nobody" }), "email:"},
		{"on_demand needs allow", acme(func(c *tlsconf.Config) { c.OnDemand.Enabled = true }), "on_demand.allow: required"},
		{"on_demand alone is enough for acme", acme(func(c *tlsconf.Config) {
			c.Domains = nil
			c.OnDemand = tlsconf.OnDemandConfig{Enabled: true, Allow: []string{"a.example.com"}}
		}), ""},
		{"negative hsts max_age", func() tlsconf.Config { c := tlsconf.DefaultConfig(); c.HSTS.MaxAge = -time.Second; return c }(), "hsts.max_age: must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func ExampleConfig_Validate() {
	cfg := tlsconf.DefaultConfig()
	cfg.Mode = tlsconf.ModeFiles
	cfg.CertFile = "/etc/keygate/tls.crt"
	fmt.Println(cfg.Validate())
	// Output: key_file: required when mode is files
}

func ExampleManager_HSTSHeader() {
	cfg := tlsconf.DefaultConfig()
	cfg.Mode = tlsconf.ModeOff
	m, _ := tlsconf.New(context.Background(), cfg, tlsconf.Deps{})
	fmt.Printf("%q %v\n", m.HSTSHeader(), m.TLSConfig() == nil)
	// Output: "" true
}

func BenchmarkHandshakeSelfSigned(b *testing.B) {
	m, err := tlsconf.New(context.Background(), selfSignedConfig(b.TempDir()), tlsconf.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	port := serveTLS(b, m, nil, hello)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := leaf(b, port, "localhost"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestYAMLSection(t *testing.T) {
	t.Parallel()
	doc := `
mode: acme
min_version: "1.3"
domains: [api.example.com]
email: ops@example.com
ca: https://acme-staging-v02.api.letsencrypt.org/directory
challenges: [tls-alpn-01]
storage: redis
on_demand: { enabled: true, allow: [a.example.com] }
hsts: { enabled: true, max_age: 720h, include_subdomains: true, preload: false }
`
	cfg := tlsconf.DefaultConfig()
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.HSTS.MaxAge != 720*time.Hour || !cfg.OnDemand.Enabled || cfg.OnDemand.Allow[0] != "a.example.com" ||
		cfg.Storage != "redis" || cfg.StoragePath != "./data/certmagic" || cfg.Challenges[0] != "tls-alpn-01" || len(cfg.Challenges) != 1 {
		t.Errorf("decoded %+v", cfg)
	}
}
