package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/usage"
)

// UsageBackend is a usage store as keygate uses it: the flusher writes
// its counts, keyops reads them.
type UsageBackend interface {
	usage.Store
	keyops.UsageReader
}

var (
	_ UsageBackend = (*usage.RedisStore)(nil)
	_ UsageBackend = (*usage.FileStore)(nil)
)

// UsageStore is where a configuration keeps per-key usage: Redis (under
// redis.key_prefix) when the keystore or the rate limiter is on Redis, so
// that every replica's counts meet; else the file keystore's companion
// file KEYS_FILE.usage.json. client is the Redis client of the first case.
func UsageStore(cfg config.Config, client redis.UniversalClient) UsageBackend {
	if cfg.Keystore.Backend == "redis" || cfg.RateLimit.Backend == "redis" {
		return &usage.RedisStore{Client: client, Prefix: cfg.Redis.KeyPrefix,
			LastUseStep: cfg.Usage.LastUsedResolution, LastUseKeys: cfg.Usage.MaxKeys}
	}
	return &usage.FileStore{Path: cfg.Keystore.File + ".usage.json"}
}

// QuotaReader reads a bucket's quota use from the Redis limiter's own
// quota counter (see ratelimit/redis.go); nil unless ratelimit.backend is
// redis (a local limiter's quota is per replica and not readable here).
func QuotaReader(cfg config.Config, client redis.UniversalClient) keyops.QuotaReader {
	if cfg.RateLimit.Backend != ratelimit.BackendRedis || client == nil {
		return nil
	}
	prefix := cfg.Redis.KeyPrefix
	if prefix == "" {
		prefix = ratelimit.DefaultKeyPrefix
	}
	return func(ctx context.Context, bucket string) (int64, time.Duration, error) {
		k := prefix + "q:{" + bucket + "}"
		v, err := client.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, err
		}
		used, _ := strconv.ParseInt(v, 10, 64)
		ttl, err := client.PTTL(ctx, k).Result()
		return used, max(ttl, 0), err
	}
}

// usageAPI serves GET /v1/keys/{id}/usage from keyops.
type usageAPI struct{ ops *keyops.Service }

func (u usageAPI) KeyUsage(ctx context.Context, id string, since time.Duration) (any, error) {
	return u.ops.KeyUsage(ctx, id, since)
}

// Migration implements adminapi.MigrationReader.
func (u usageAPI) Migration(ctx context.Context, since time.Duration, consumer string) (any, error) {
	return u.ops.Migration(ctx, keyops.MigrationQuery{Since: since, Consumer: consumer, MaxKeys: keyops.MaxReportKeys})
}

// openUsage starts counting usage and flushing it every
// usage.flush_interval; the flusher's last flush runs on Shutdown, after
// the listeners drained and before Redis is closed.
func (s *Server) openUsage(ctx context.Context) (*usage.Counters, error) {
	counters := usage.NewCounters(s.cfg.Usage.MaxKeys)
	flushes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_usage_flushes_total",
		Help: "Flushes of the per-key usage counts to the usage store (one Redis pipeline each), by outcome (ok, error).",
	}, []string{"outcome"})
	flushes.WithLabelValues("ok") // at 0, so the first error is an increase
	flushes.WithLabelValues("error")
	s.registry.MustRegister(flushes, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "keygate_usage_dropped_total",
		Help: "Requests not counted in per-key usage because usage.max_keys keys were already tracked in the flush interval.",
	}, func() float64 { return float64(counters.Dropped()) }))
	f, err := usage.NewFlusher(ctx, usage.FlusherConfig{
		Counters: counters,
		Store:    UsageStore(s.cfg, s.redis),
		Interval: s.cfg.Usage.FlushInterval,
		Logger:   s.log.Named("usage"),
		OnFlush: func(err error) {
			if err != nil {
				flushes.WithLabelValues("error").Inc()
				return
			}
			flushes.WithLabelValues("ok").Inc()
		},
	})
	if err != nil {
		return nil, err
	}
	s.onClose(f.Close)
	return counters, nil
}
