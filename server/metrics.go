package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keygate/keygate/ratelimit"
)

// The metrics the server registers for the components it builds (the
// gateway registers its own, in package gateway).

// registerKeystoreMetrics registers the keystore's reload metrics and
// returns the keystore's OnReload that feeds them.
func registerKeystoreMetrics(reg prometheus.Registerer) func(int, error) {
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_keystore_reloads_total",
		Help: "Keystore (re)loads, by result (ok, error). On error the last good keystore keeps serving.",
	}, []string{"result"})
	keys := prometheus.NewGauge(prometheus.GaugeOpts{Name: "keygate_keystore_keys", Help: "Key records in the loaded keystore."})
	reg.MustRegister(reloads, keys)
	return func(n int, err error) {
		if err != nil {
			reloads.WithLabelValues("error").Inc()
			return
		}
		reloads.WithLabelValues("ok").Inc()
		keys.Set(float64(n))
	}
}

// registerDegraded registers a gauge that is 1 while d runs degraded.
func registerDegraded(reg prometheus.Registerer, name, help string, d degradable) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
		if d.Degraded() {
			return 1
		}
		return 0
	}))
}

// registerLimiterMetrics exposes the Redis limiter's outage state: whether
// it runs degraded, and how its decisions were made.
func registerLimiterMetrics(reg prometheus.Registerer, l *ratelimit.Resilient) {
	registerDegraded(reg, "keygate_ratelimit_degraded", "1 while Redis is unavailable and the rate limiter runs on its outage policy (failure_mode).", l)
	counter := func(name, help string, f func(ratelimit.Stats) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(l.Stats())) }))
	}
	counter("keygate_ratelimit_redis_decisions_total", "Rate-limit decisions made by Redis.", func(s ratelimit.Stats) uint64 { return s.RedisDecisions })
	counter("keygate_ratelimit_cached_refusals_total", "Refusals answered from the local over-limit cache without Redis.", func(s ratelimit.Stats) uint64 { return s.CachedRefusals })
	counter("keygate_ratelimit_fallback_decisions_total", "Decisions made by the local fallback limiter during a Redis outage (failure_mode open).", func(s ratelimit.Stats) uint64 { return s.FallbackDecisions })
	counter("keygate_ratelimit_unavailable_total", "Requests refused with 503 because Redis was unavailable (failure_mode closed).", func(s ratelimit.Stats) uint64 { return s.UnavailableErrors })
	counter("keygate_ratelimit_redis_errors_total", "Failed Redis calls of the rate limiter.", func(s ratelimit.Stats) uint64 { return s.RedisErrors })
	counter("keygate_ratelimit_breaker_changes_total", "Circuit-breaker state changes of the rate limiter's Redis connection.", func(s ratelimit.Stats) uint64 { return s.BreakerStateChanges })
}
