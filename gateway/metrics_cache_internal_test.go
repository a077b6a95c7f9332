package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keygate/keygate/auth"
)

// TestSeriesCacheCountsEachSeries: the cached series count exactly the
// requests of their own labels, the label values the cache does not hold
// (an OAuth client's own env, an unknown status) as well as those it does,
// and /metrics shows only the series that were used.
func TestSeriesCacheCountsEachSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	// value is the series of name with labels (pairs of name and value)
	// as /metrics shows it, and how many series name has.
	value := func(name string, labels ...string) (v float64, series int) {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, s := range f.GetMetric() {
				series++
				match := true
				for _, l := range s.GetLabel() {
					for i := 0; i < len(labels); i += 2 {
						if l.GetName() == labels[i] && l.GetValue() != labels[i+1] {
							match = false
						}
					}
				}
				if match {
					v = s.GetCounter().GetValue()
				}
			}
		}
		return v, series
	}
	keys := []struct {
		method auth.Method
		env    string
		n      int
	}{
		{auth.MethodAPIKey, "live", 3},
		{auth.MethodAPIKey, "test", 1},
		{auth.MethodBearer, "live", 2},
		{auth.MethodOAuth2, "staging", 2}, // not cached
		{auth.Method("other"), "live", 1}, // not cached
	}
	for _, k := range keys {
		for range k.n {
			m.keyRequests(k.method, k.env).Inc()
		}
	}
	for _, k := range keys {
		got, series := value("keygate_authenticated_requests_total", "method", string(k.method), "env", k.env)
		if got != float64(k.n) {
			t.Errorf("keygate_authenticated_requests_total{method=%q,env=%q} = %v, want %d", k.method, k.env, got, k.n)
		}
		if series != len(keys) {
			t.Errorf("%d series, want %d: only those used", series, len(keys))
		}
	}
	for range 2 {
		m.requests(routeSync, 200).Inc()
	}
	m.requests(routeSync, 403).Inc()
	m.requests(routeRegistry, 200).Inc()
	m.requests(routeSync, 999).Inc() // not cached
	for _, c := range []struct {
		route, status string
		want          float64
	}{{"sync", "200", 2}, {"sync", "403", 1}, {"registry", "200", 1}, {"sync", "999", 1}} {
		if got, _ := value("keygate_requests_total", "route", c.route, "status", c.status); got != c.want {
			t.Errorf("keygate_requests_total{route=%q,status=%q} = %v, want %v", c.route, c.status, got, c.want)
		}
	}
}
