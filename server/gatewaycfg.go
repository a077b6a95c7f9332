package server

import (
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/gateway"
)

// The configuration file's sections as the gateway takes them: package
// config owns the YAML, the gateway takes plain values.

// gatewayUpstreams maps the upstreams section to the gateway's upstreams.
func gatewayUpstreams(c config.UpstreamsConfig) gateway.UpstreamsConfig {
	return gateway.UpstreamsConfig{Extraction: gatewayUpstream(c.Extraction), Registry: gatewayUpstream(c.Registry)}
}

func gatewayUpstream(c config.UpstreamConfig) gateway.UpstreamConfig {
	return gateway.UpstreamConfig{
		Targets:             c.Targets,
		Timeout:             c.Timeout,
		DialTimeout:         c.DialTimeout,
		MaxIdleConnsPerHost: c.MaxIdleConnsPerHost,
		IdleTimeout:         c.IdleTimeout,
	}
}

// gatewayDeprecation maps auth.api_keys.deprecation to the gateway's
// announcement.
func gatewayDeprecation(c config.DeprecationConfig) gateway.Deprecation {
	return gateway.Deprecation{Date: c.Date, Sunset: c.Sunset, Link: c.Link}
}
