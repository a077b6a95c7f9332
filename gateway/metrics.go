package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus series. Build it once with
// NewMetrics and share it; it is safe for concurrent use. The zero value
// and a nil *Metrics are not usable; a Gateway whose Deps.Metrics is nil
// builds its own, registered nowhere.
type Metrics struct {
	Requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	AuthFailures    *prometheus.CounterVec
	RateLimited     *prometheus.CounterVec
	UpstreamLatency *prometheus.HistogramVec
	KeyRequests     *prometheus.CounterVec
	// Refused counts the requests keygate answered itself, by the label
	// of their refusal kind (see refusals).
	Refused      *prometheus.CounterVec
	refusedBy    [numRefusalKinds]prometheus.Counter
	statusLabels map[int]string
	cache        seriesCache
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keygate_requests_total",
			Help: "Requests answered, by route (sync, registry, other) and status code.",
		}, []string{"route", "status"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keygate_request_duration_seconds",
			Help:    "Time from request start to the end of the response, by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"route"}),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keygate_auth_failures_total",
			Help: "Requests refused for their credentials, by reason (missing, malformed, checksum, unknown, revoked, expired, duplicate, ...).",
		}, []string{"reason"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keygate_ratelimited_total",
			Help: "Requests refused by the rate limit or the quota, by env and reason (rate, quota).",
		}, []string{"env", "reason"}),
		UpstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keygate_upstream_duration_seconds",
			Help:    "Time from sending a request upstream to its response headers, by upstream.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"upstream"}),
		KeyRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keygate_authenticated_requests_total",
			Help: "Authenticated requests by credential method (api_key; bearer: a token keygate issued for a key; oauth2: an external issuer's token) and env (live, test; oauth2 clients' env). Per-key figures are in the usage store (keygate keys usage), never a label.",
		}, []string{"method", "env"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keygate_refusals_total",
			Help: "Requests keygate answered itself instead of the upstream, by reason: refusals (method, credential, rate, quota, concurrency, context, too_large, body_idle, body_slow, upstream, ...) and client_gone (logged as 499).",
		}, []string{"reason"}),
		statusLabels: map[int]string{},
	}
	for k := refusalKind(1); k < numRefusalKinds; k++ {
		m.refusedBy[k] = m.Refused.WithLabelValues(refusals[k].label)
	}
	for _, c := range []int{200, 201, 204, 400, 401, 403, 404, 405, 413, 429, 499, 500, 502, 503, 504} {
		m.statusLabels[c] = strconv.Itoa(c)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.RequestDuration, m.AuthFailures, m.RateLimited, m.UpstreamLatency, m.KeyRequests, m.Refused)
	}
	return m
}

func (m *Metrics) status(code int) string {
	if s, ok := m.statusLabels[code]; ok {
		return s
	}
	return strconv.Itoa(code)
}

// refused is keygate_refusals_total for a refusal kind.
func (m *Metrics) refused(k refusalKind) prometheus.Counter { return m.refusedBy[k] }
