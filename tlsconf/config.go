package tlsconf

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/fieldpath"
)

// Modes of Config.Mode.
const (
	ModeOff        = "off"
	ModeSelfSigned = "self_signed"
	ModeFiles      = "files"
	ModeACME       = "acme"
)

// ACME challenge types of Config.Challenges.
const (
	ChallengeHTTP01    = "http-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// Config is the `tls:` section of keygate's configuration. Get defaults
// from DefaultConfig; check it with Validate.
type Config struct {
	// Mode is off, self_signed, files or acme.
	Mode string `yaml:"mode"`
	// MinVersion is the lowest TLS version accepted: "1.2" or "1.3".
	MinVersion string `yaml:"min_version"`

	// SelfSignedDir keeps cert.pem and key.pem (mode 0600) across restarts
	// in self_signed mode.
	SelfSignedDir string `yaml:"self_signed_dir"`
	// Names are extra DNS names or IP addresses for the self-signed
	// certificate; localhost, 127.0.0.1 and ::1 are always included.
	Names []string `yaml:"names"`

	// CertFile and KeyFile are the PEM certificate chain and key in files
	// mode; they are reloaded when they change on disk.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`

	// Domains get certificates from the ACME CA in acme mode.
	Domains []string `yaml:"domains"`
	// Email is the ACME account contact (optional).
	Email string `yaml:"email"`
	// CA is the ACME directory URL.
	CA string `yaml:"ca"`
	// CARoot is a PEM file trusted for the CA's directory (for a test CA
	// such as Pebble); empty means the system roots.
	CARoot string `yaml:"ca_root"`
	// Challenges enabled: http-01 (served on the plain-HTTP listener
	// through Manager.HTTPChallengeHandler) and tls-alpn-01 (served on the
	// API listener through Manager.TLSConfig).
	Challenges []string `yaml:"challenges"`
	// Storage is file or redis; every replica must share one storage.
	Storage string `yaml:"storage"`
	// StoragePath is the directory of file storage.
	StoragePath string `yaml:"storage_path"`
	// OnDemand obtains certificates at the first handshake for a name.
	OnDemand OnDemandConfig `yaml:"on_demand"`
	// HSTS is the Strict-Transport-Security header keygate sends.
	HSTS HSTSConfig `yaml:"hsts"`
}

// OnDemandConfig is `tls.on_demand`.
type OnDemandConfig struct {
	// Enabled turns on-demand issuance on. Only names in Allow (and in
	// tls.domains) then get a certificate, at their first handshake;
	// any other SNI is refused without contacting the CA.
	Enabled bool `yaml:"enabled"`
	// Allow lists the names that may get a certificate on demand.
	Allow []string `yaml:"allow"`
}

// HSTSConfig is `tls.hsts`.
type HSTSConfig struct {
	Enabled           bool          `yaml:"enabled"`
	MaxAge            time.Duration `yaml:"max_age"`
	IncludeSubdomains bool          `yaml:"include_subdomains"`
	Preload           bool          `yaml:"preload"`
}

// Let's Encrypt's directories.
const (
	LetsEncryptProduction = "https://acme-v02.api.letsencrypt.org/directory"
	LetsEncryptStaging    = "https://acme-staging-v02.api.letsencrypt.org/directory"
)

// DefaultConfig returns the defaults: a self-signed certificate kept in
// ./data/tls, TLS 1.2 and up, and the acme settings a switch of mode needs.
func DefaultConfig() Config {
	return Config{
		Mode:          ModeSelfSigned,
		MinVersion:    "1.2",
		SelfSignedDir: "./data/tls",
		CA:            LetsEncryptProduction,
		Challenges:    []string{ChallengeHTTP01, ChallengeTLSALPN01},
		Storage:       "file",
		StoragePath:   "./data/certmagic",
		HSTS:          HSTSConfig{Enabled: true, MaxAge: 365 * 24 * time.Hour},
	}
}

// Validate checks the section and reports the first problem, naming the
// offending field by its YAML path.
func (c Config) Validate() error {
	var v fieldpath.First
	bad := v.Bad
	switch c.MinVersion {
	case "1.2", "1.3":
	default:
		bad("min_version", "must be \"1.2\" or \"1.3\", got %q", c.MinVersion)
	}
	if c.HSTS.MaxAge < 0 {
		bad("hsts.max_age", "must not be negative, got %v", c.HSTS.MaxAge)
	}
	switch c.Mode {
	case ModeOff:
	case ModeSelfSigned:
		if c.SelfSignedDir == "" {
			bad("self_signed_dir", "required when mode is self_signed")
		}
		for i, n := range c.Names {
			if net.ParseIP(n) == nil && !validDNSName(n) {
				bad(fmt.Sprintf("names[%d]", i), "%q is neither an IP address nor a DNS name", n)
			}
		}
	case ModeFiles:
		if c.CertFile == "" {
			bad("cert_file", "required when mode is files")
		}
		if c.KeyFile == "" {
			bad("key_file", "required when mode is files")
		}
	case ModeACME:
		if len(c.Domains) == 0 && !c.OnDemand.Enabled {
			bad("domains", "at least one domain is required when mode is acme (unless on_demand.enabled)")
		}
		for i, d := range c.Domains {
			if !validDNSName(d) {
				bad(fmt.Sprintf("domains[%d]", i), "%q is not a DNS name (wildcards need dns-01, which keygate does not do)", d)
			}
		}
		if u, err := url.Parse(c.CA); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("ca", "must be an https:// ACME directory URL, got %q", c.CA)
		}
		if c.Email != "" && (!strings.Contains(c.Email, "@") || strings.ContainsAny(c.Email, " \t\r\n")) {
			bad("email", "%q is not an email address", c.Email)
		}
		if len(c.Challenges) == 0 {
			bad("challenges", "at least one of http-01, tls-alpn-01 is required")
		}
		seen := map[string]bool{}
		for i, ch := range c.Challenges {
			if ch != ChallengeHTTP01 && ch != ChallengeTLSALPN01 {
				bad(fmt.Sprintf("challenges[%d]", i), "must be http-01 or tls-alpn-01, got %q", ch)
			} else if seen[ch] {
				bad(fmt.Sprintf("challenges[%d]", i), "%s is listed twice", ch)
			}
			seen[ch] = true
		}
		switch c.Storage {
		case "file":
			if c.StoragePath == "" {
				bad("storage_path", "required when storage is file")
			}
		case "redis":
		default:
			bad("storage", "must be file or redis, got %q", c.Storage)
		}
		if c.OnDemand.Enabled && len(c.OnDemand.Allow) == 0 {
			bad("on_demand.allow", "required when on_demand.enabled is true (otherwise any SNI could trigger an order)")
		}
		for i, d := range c.OnDemand.Allow {
			if !validDNSName(d) {
				bad(fmt.Sprintf("on_demand.allow[%d]", i), "%q is not a DNS name", d)
			}
		}
	default:
		bad("mode", "must be off, self_signed, files or acme, got %q", c.Mode)
	}
	return v.Err()
}

// validDNSName reports whether s is a plausible host name (letters, digits,
// hyphens and dots, labels of 1–63 bytes, at most 253 bytes).
func validDNSName(s string) bool {
	if s == "" || len(s) > 253 || strings.HasSuffix(s, ".") {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return net.ParseIP(s) == nil
}
