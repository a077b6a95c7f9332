package portal

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiterSet is a token bucket per key (a client address, a session),
// in process. Idle buckets are dropped; past maxKeys, keys not yet seen
// share one bucket, so a flood of new addresses cannot grow memory.
type limiterSet struct {
	mu       sync.Mutex
	rate     rate.Limit
	burst    int
	now      func() time.Time
	m        map[string]*limEntry
	overflow *rate.Limiter
}

type limEntry struct {
	l    *rate.Limiter
	last time.Time
}

const (
	maxLimiterKeys = 10000
	limiterIdle    = 10 * time.Minute
)

func newLimiterSet(perSecond float64, burst int, now func() time.Time) *limiterSet {
	return &limiterSet{rate: rate.Limit(perSecond), burst: burst, now: now, m: map[string]*limEntry{},
		overflow: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

func (s *limiterSet) allow(key string) bool {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok {
		if len(s.m) >= maxLimiterKeys {
			for k, e := range s.m {
				if now.Sub(e.last) > limiterIdle {
					delete(s.m, k)
				}
			}
		}
		if len(s.m) >= maxLimiterKeys {
			return s.overflow.AllowN(now, 1)
		}
		e = &limEntry{l: rate.NewLimiter(s.rate, s.burst)}
		s.m[key] = e
	}
	e.last = now
	return e.l.AllowN(now, 1)
}
