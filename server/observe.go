package server

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keygate/keygate/internal/statuswriter"
	"github.com/keygate/keygate/tracing"
)

// What the server reports about itself and its listeners: build info,
// requests in flight per listener, the admin API's and the portal's
// request and error series, the served certificate's expiry, and the
// tracing handler of every listener.

// Listener names, the listener label of keygate_requests_in_flight and of
// the management series.
const (
	listenerAPI       = "api"
	listenerPlainHTTP = "plain_http"
	listenerAdminAPI  = "admin_api"
	listenerPortal    = "portal"
)

// version is the build's version: Deps.Version, else the module version
// the binary was built from, else "dev".
func version(v string) string {
	if v != "" {
		return v
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// observer holds the server's own series. It is safe for concurrent use.
type observer struct {
	inflight [4]atomic.Int64 // by listener, in listeners' order
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	tracing  *tracing.Provider
}

var listeners = [...]string{listenerAPI, listenerPlainHTTP, listenerAdminAPI, listenerPortal}

// newObserver registers keygate_build_info, keygate_requests_in_flight and
// the management series with reg.
func newObserver(reg prometheus.Registerer, ver string, tp *tracing.Provider) *observer {
	o := &observer{tracing: tp}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "keygate_build_info",
		Help: "Always 1; its labels are the running build's version and Go version.",
	}, []string{"version", "go_version"})
	build.WithLabelValues(version(ver), runtime.Version()).Set(1)
	reg.MustRegister(build)
	for i, l := range listeners {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "keygate_requests_in_flight",
			Help:        "Requests being served right now, by listener (api, plain_http, admin_api, portal); uploads count until their response is written.",
			ConstLabels: prometheus.Labels{"listener": l},
		}, func() float64 { return float64(o.inflight[i].Load()) }))
	}
	o.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_management_requests_total",
		Help: "Requests to the admin API and the portal, by listener (admin_api, portal), route (the mux pattern, \"(none)\" when none matched) and status code.",
	}, []string{"listener", "route", "status"})
	o.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_management_errors_total",
		Help: "Admin API and portal requests answered with an error, by listener, route and class (client: 4xx, server: 5xx).",
	}, []string{"listener", "route", "class"})
	o.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "keygate_management_request_duration_seconds",
		Help:    "Time to serve an admin API or portal request, by listener.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	}, []string{"listener"})
	reg.MustRegister(o.requests, o.errors, o.duration)
	for _, l := range []string{listenerAdminAPI, listenerPortal} {
		o.duration.WithLabelValues(l)
		for _, c := range []string{"client", "server"} {
			o.errors.WithLabelValues(l, "(none)", c)
		}
	}
	return o
}

// listener wraps the handler of one listener: its tracing handler (when
// tracing is on) and its in-flight count.
func (o *observer) listener(name string, h http.Handler) http.Handler {
	i := 0
	for j, l := range listeners {
		if l == name {
			i = j
		}
	}
	n := &o.inflight[i]
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		defer n.Add(-1)
		h.ServeHTTP(w, r)
	})
	return o.tracing.Handler(name, counted)
}

// management wraps the admin API's or the portal's handler: requests and
// errors by route and status, and the time each takes.
func (o *observer) management(name string, h http.Handler) http.Handler {
	dur := o.duration.WithLabelValues(name)
	return o.listener(name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statuswriter.Wrap(w)
		h.ServeHTTP(sw, r)
		dur.Observe(time.Since(start).Seconds())
		// The mux sets the route on the request it was given: r.
		route := r.Pattern
		if route == "" {
			route = "(none)"
		}
		status := sw.Status()
		if status == 0 {
			status = http.StatusOK
		}
		o.requests.WithLabelValues(name, route, strconv.Itoa(status)).Inc()
		switch {
		case status >= 500:
			o.errors.WithLabelValues(name, route, "server").Inc()
		case status >= 400:
			o.errors.WithLabelValues(name, route, "client").Inc()
		}
	}))
}

// registerCertExpiry exports the served certificate's expiry; 0 while
// none is served (tls.mode off, or an ACME certificate not yet obtained).
func registerCertExpiry(reg prometheus.Registerer, notAfter func() time.Time) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keygate_tls_certificate_expiry_timestamp_seconds",
		Help: "Unix time at which the API listener's certificate expires (the earliest, with several ACME names); 0 while none is served.",
	}, func() float64 {
		t := notAfter()
		if t.IsZero() {
			return 0
		}
		return float64(t.Unix())
	}))
}
