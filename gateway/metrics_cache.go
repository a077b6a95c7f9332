package gateway

import (
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keygate/keygate/auth"
)

// seriesCache keeps the per-request series once looked up, so that the
// request path does not hash label values and take the vectors' locks for
// every request. It fills lazily, so /metrics shows exactly the series that
// were used, as with WithLabelValues. Safe for concurrent use; the zero
// value is ready.
type seriesCache struct {
	requests    [numRoutes][600]atomic.Pointer[prometheus.Counter]
	duration    [numRoutes]atomic.Pointer[prometheus.Observer]
	keyRequests [len(authMethods)][len(envs)]atomic.Pointer[prometheus.Counter]
}

// authMethods and envs are the label values of
// keygate_authenticated_requests_total
// the cache holds; others go straight to the vector.
var (
	authMethods = [...]auth.Method{auth.MethodAPIKey, auth.MethodOAuth2, auth.MethodBearer}
	envs        = [...]string{"live", "test"}
)

// keyRequests is keygate_authenticated_requests_total{method, env}.
func (m *Metrics) keyRequests(method auth.Method, env string) prometheus.Counter {
	mi, ei := slices.Index(authMethods[:], method), slices.Index(envs[:], env)
	if mi < 0 || ei < 0 {
		return m.KeyRequests.WithLabelValues(string(method), env)
	}
	slot := &m.cache.keyRequests[mi][ei]
	if c := slot.Load(); c != nil {
		return *c
	}
	c := m.KeyRequests.WithLabelValues(string(method), env)
	slot.Store(&c)
	return c
}

// numRoutes bounds the route values the cache holds; others go straight to
// the vectors.
const numRoutes = 8

// requests is keygate_requests_total{route, status}.
func (m *Metrics) requests(r route, status int) prometheus.Counter {
	if int(r) < 0 || int(r) >= numRoutes || status < 0 || status >= 600 {
		return m.Requests.WithLabelValues(r.String(), m.status(status))
	}
	slot := &m.cache.requests[r][status]
	if c := slot.Load(); c != nil {
		return *c
	}
	c := m.Requests.WithLabelValues(r.String(), m.status(status))
	slot.Store(&c)
	return c
}

// duration is keygate_request_duration_seconds{route}.
func (m *Metrics) duration(r route) prometheus.Observer {
	if int(r) < 0 || int(r) >= numRoutes {
		return m.RequestDuration.WithLabelValues(r.String())
	}
	slot := &m.cache.duration[r]
	if o := slot.Load(); o != nil {
		return *o
	}
	o := m.RequestDuration.WithLabelValues(r.String())
	slot.Store(&o)
	return o
}

// upstreamLatency is keygate_upstream_duration_seconds{upstream} for u,
// cached in u.
func (m *Metrics) upstreamLatency(u *upstream) prometheus.Observer {
	if o := u.latency.Load(); o != nil && o.m == m {
		return o.obs
	}
	o := &upstreamObserver{m: m, obs: m.UpstreamLatency.WithLabelValues(u.name)}
	u.latency.Store(o)
	return o.obs
}

type upstreamObserver struct {
	m   *Metrics
	obs prometheus.Observer
}
