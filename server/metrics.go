package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keygate/keygate/internal/tokencache"
	"github.com/keygate/keygate/policy"
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
	reg.MustRegister(reloads)
	reloads.WithLabelValues("ok") // both at 0, so the first error is an increase
	reloads.WithLabelValues("error")
	return func(n int, err error) {
		if err != nil {
			reloads.WithLabelValues("error").Inc()
			return
		}
		reloads.WithLabelValues("ok").Inc()
	}
}

// registerKeyCount registers keygate_keystore_keys, read from the store
// at each scrape: current after every change, not only after a reload.
func registerKeyCount(reg prometheus.Registerer, store interface{ Len() int }) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keygate_keystore_keys", Help: "Key records the keystore serves (active, revoked, rotated and expired alike).",
	}, func() float64 { return float64(store.Len()) }))
}

// keystoreEvents are the Redis keystore's failure counters; the zero
// value is not usable, use newKeystoreEvents.
type keystoreEvents struct {
	waitTimeouts *prometheus.CounterVec
	blocked      prometheus.Counter
	logGaps      prometheus.Counter
	dataLoss     prometheus.Counter
}

func newKeystoreEvents(reg prometheus.Registerer) *keystoreEvents {
	e := &keystoreEvents{
		waitTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keygate_keystore_wait_timeouts_total",
			Help: "Key changes whose Redis WAIT timed out (fewer replicas than keystore.wait_replicas confirmed them), by change: key, consumer, admin_token, import. Each answered 503.",
		}, []string{"change"}),
		blocked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keygate_keystore_reinstatements_blocked_total",
			Help: "Re-reads of Redis that would have reinstated a key this replica saw revoked or rotated; the key stayed ended and was written back.",
		}),
		logGaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keygate_keystore_log_gaps_total",
			Help: "Times the change log no longer held this replica's position (trimmed, or Redis lost it) and it re-read every record.",
		}),
		dataLoss: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "keygate_keystore_data_loss_total",
			Help: "Times this replica found that Redis lost keystore data (epoch gone or changed, or a re-read would drop most keys) and repaired it.",
		}),
	}
	for _, c := range []string{"key", "consumer", "admin_token", "import"} {
		e.waitTimeouts.WithLabelValues(c)
	}
	reg.MustRegister(e.waitTimeouts, e.blocked, e.logGaps, e.dataLoss)
	return e
}

func (e *keystoreEvents) waitTimeout(change string) { e.waitTimeouts.WithLabelValues(change).Inc() }

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
	counter("keygate_ratelimit_leased_decisions_total", "Requests admitted from a lease of Redis cells (ratelimit.lease), without a Redis call.", func(s ratelimit.Stats) uint64 { return s.LeasedDecisions })
	counter("keygate_ratelimit_cached_refusals_total", "Refusals answered from the local over-limit cache without Redis.", func(s ratelimit.Stats) uint64 { return s.CachedRefusals })
	counter("keygate_ratelimit_fallback_decisions_total", "Decisions made by the local fallback limiter during a Redis outage (failure_mode open).", func(s ratelimit.Stats) uint64 { return s.FallbackDecisions })
	counter("keygate_ratelimit_unavailable_total", "Requests refused with 503 because Redis was unavailable (failure_mode closed).", func(s ratelimit.Stats) uint64 { return s.UnavailableErrors })
	counter("keygate_ratelimit_redis_errors_total", "Failed Redis calls of the rate limiter.", func(s ratelimit.Stats) uint64 { return s.RedisErrors })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keygate_ratelimit_breaker_state",
		Help: "State of the rate limiter's circuit breaker on Redis: 0 closed (Redis decides), 1 half-open (probing), 2 open (outage policy).",
	}, func() float64 {
		switch l.Stats().BreakerState {
		case "open":
			return 2
		case "half-open":
			return 1
		}
		return 0
	}))
	counter("keygate_ratelimit_breaker_changes_total", "Circuit-breaker state changes of the rate limiter's Redis connection.", func(s ratelimit.Stats) uint64 { return s.BreakerStateChanges })
}

// timedLimiter is the Redis limiter with its decision latency observed:
// keygate_ratelimit_decision_duration_seconds, the Redis round trip
// included (and the local cache's and fallback's answers, which take
// microseconds).
type timedLimiter struct {
	*ratelimit.Resilient
	obs prometheus.Observer
}

func newTimedLimiter(reg prometheus.Registerer, l *ratelimit.Resilient) timedLimiter {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "keygate_ratelimit_decision_duration_seconds",
		Help:    "Time the Redis rate limiter takes to decide one request, Redis round trip included.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
	})
	reg.MustRegister(h)
	return timedLimiter{Resilient: l, obs: h}
}

func (t timedLimiter) Allow(ctx context.Context, id string, lim policy.Limit) (ratelimit.Decision, error) {
	start := time.Now()
	d, err := t.Resilient.Allow(ctx, id, lim)
	t.obs.Observe(time.Since(start).Seconds())
	return d, err
}

// registerTokenCacheMetrics exposes what an issuer's cache of accepted
// bearer tokens did: uses answered from it, tokens checked in full (first
// uses, refusals, a token whose signing key changed) and tokens held.
// issuer is "local" (the token endpoint's) or "external" (auth.oauth2).
func registerTokenCacheMetrics(reg prometheus.Registerer, issuer string, stats func() tokencache.Stats) {
	labels := prometheus.Labels{"issuer": issuer}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keygate_bearer_tokens_cached_total", ConstLabels: labels,
			Help: "Bearer token uses answered from the cache of accepted tokens, without a signature check (the key behind the token is still read)."},
			func() float64 { return float64(stats().Answered) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keygate_bearer_tokens_checked_total", ConstLabels: labels,
			Help: "Bearer tokens whose signature and claims were checked: first uses, refusals, and tokens whose signing key changed."},
			func() float64 { return float64(stats().Checked) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "keygate_bearer_token_cache_entries", ConstLabels: labels,
			Help: "Accepted bearer tokens in the cache (at most 100,000 an issuer)."},
			func() float64 { return float64(stats().Entries) }),
	)
}
