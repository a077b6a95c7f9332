package main

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Target bare-redis is the bare proxy (bareProxy) behind one exact
// rate-limit decision a request in a Redis of its own, as a Go
// programmer would add one in a few lines with the usual library for it:
// github.com/go-redis/redis_rate (GCRA in a Lua script, one EVALSHA a
// request) over a go-redis client with its defaults, keyed by the
// request's x-api-key. It checks no key against a keystore: it is the
// floor of "a proxy with an exact shared limit in Redis", beside
// keygate-redis (side by side: sidePairs).

// bareRedisLimit is keygate's bench limit (keygateConfig): 1e6 a second,
// a burst of 1e9, so that no bench request is refused.
var bareRedisLimit = redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000_000, Period: time.Second}

// bareRedis is the bare role with -redis addr: next (the bare proxy)
// admitted when the Redis at addr allows one more request under limit
// (bareRedisLimit) for its x-api-key. Without a key it answers 401, past
// the limit 429 (with Retry-After), and 503 when Redis fails.
func bareRedis(next http.Handler, addr string, limit redis_rate.Limit) http.Handler {
	limiter := redis_rate.NewLimiter(redis.NewClient(&redis.Options{Addr: addr}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key")
		if key == "" {
			refuse(w, http.StatusUnauthorized, "missing API key")
			return
		}
		res, err := limiter.Allow(r.Context(), "bench:"+key, limit)
		switch {
		case err != nil:
			refuse(w, http.StatusServiceUnavailable, "rate limiter unavailable")
		case res.Allowed == 0:
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(res.RetryAfter.Seconds()))))
			refuse(w, http.StatusTooManyRequests, "rate limit exceeded")
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// refuse answers status with a small JSON error body of the spec's shape
// (StateText ERROR and the message).
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"StateText":"ERROR","Messages":["` + msg + `"]}` + "\n"))
}
