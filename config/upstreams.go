package config

import (
	"fmt"
	"net/url"
	"time"
)

// UpstreamsConfig is the upstreams section: the two backends of the spec.
// The server hands it to the gateway as gateway.UpstreamsConfig.
type UpstreamsConfig struct {
	Extraction UpstreamConfig `yaml:"extraction"`
	Registry   UpstreamConfig `yaml:"registry"`
}

// UpstreamConfig is one backend: where it is and how long to wait for it.
// A zero duration or pool size takes the gateway's default.
type UpstreamConfig struct {
	// Targets are base URLs (scheme://host:port, no path) of equivalent
	// instances, load-balanced round-robin. At least one.
	Targets []string `yaml:"targets"`
	// Timeout is how long to wait for the upstream's response headers once
	// the request is sent; past it the client gets 504. Default 60s.
	Timeout time.Duration `yaml:"timeout"`
	// DialTimeout bounds connecting to a target. Default 2s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// MaxIdleConnsPerHost is the keep-alive pool per target. Default
	// gateway.DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
	// IdleTimeout is how long a kept connection may stay idle before
	// keygate closes it. Default gateway.DefaultIdleTimeout.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// DeprecationConfig is auth.api_keys.deprecation: the announced end of API
// keys, sent on every key-authenticated response (Deprecation, Sunset and
// Link headers) and shown by the portal. The zero value announces nothing.
type DeprecationConfig struct {
	// Date is when API keys were deprecated.
	Date time.Time `yaml:"date"`
	// Sunset is when API keys stop working.
	Sunset time.Time `yaml:"sunset"`
	// Link points to the migration guide.
	Link string `yaml:"link"`
}

// Validate checks both upstreams; the error names the field within the
// section.
func (c UpstreamsConfig) Validate() error {
	if err := c.Extraction.validate("extraction"); err != nil {
		return err
	}
	return c.Registry.validate("registry")
}

// validate checks one upstream; path is its YAML path within the section.
func (c UpstreamConfig) validate(path string) error {
	if len(c.Targets) == 0 {
		return fmt.Errorf("%s.targets: at least one target is required", path)
	}
	for i, t := range c.Targets {
		if err := checkTarget(t); err != nil {
			return fmt.Errorf("%s.targets[%d]: %w", path, i, err)
		}
	}
	if c.Timeout < 0 || c.DialTimeout < 0 || c.MaxIdleConnsPerHost < 0 || c.IdleTimeout < 0 {
		return fmt.Errorf("%s: timeouts and pool sizes must not be negative", path)
	}
	return nil
}

// checkTarget accepts what the gateway proxies to: an http or https base
// URL with a host and nothing after it.
func checkTarget(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: host is missing", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("%q: must be scheme://host:port with no path, query or credentials", s)
	}
	return nil
}
