package server

import (
	"context"

	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keygate/keygate/ratelimit"
)

// openFailureLimit builds auth.failure_limit: counts in Redis (under
// redis.key_prefix) when ratelimit.backend is redis, so every replica sees
// every failure, else in memory; nil when it is disabled. Its counters are
// registered as metrics.
func (s *Server) openFailureLimit(_ context.Context, w *wiring) error {
	cfg := ratelimit.FailuresConfig{Limit: s.cfg.Auth.FailureLimit, Logger: s.log.Named("failure_limit")}
	if s.cfg.RateLimit.Backend == ratelimit.BackendRedis {
		rl := s.cfg.RateLimit
		cfg.Redis, cfg.KeyPrefix, cfg.Timeout, cfg.Replicas = s.redis, s.cfg.Redis.KeyPrefix, rl.RedisTimeout, rl.Replicas
		cfg.BreakerFailures, cfg.BreakerBackoff = rl.BreakerFailures, rl.BreakerBackoff
	}
	f, err := ratelimit.NewFailures(cfg)
	if err != nil || f == nil {
		return fieldpath.Within("auth.failure_limit", err)
	}
	counter := func(name, help string, v func(ratelimit.FailureStats) uint64) {
		s.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v(f.Stats())) }))
	}
	counter("keygate_auth_failures_counted_total",
		"Failed authentications counted against their source address by auth.failure_limit (requests without any credential are not counted).",
		func(st ratelimit.FailureStats) uint64 { return st.Counted })
	counter("keygate_auth_throttled_total",
		"Requests refused with 429 because their source address had too many failed authentications (auth.failure_limit), before any key lookup.",
		func(st ratelimit.FailureStats) uint64 { return st.Throttled })
	if cfg.Redis != nil {
		counter("keygate_auth_failure_limit_fallback_total",
			"Failed authentications counted locally because Redis was unavailable (auth.failure_limit fails open to a per-replica count).",
			func(st ratelimit.FailureStats) uint64 { return st.Fallback })
	}
	w.failures = f
	return nil
}
