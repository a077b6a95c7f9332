package keystore

// The Redis keystore's read side: the in-process copy that serves
// lookups, kept current by pub/sub and periodic resync.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/redisconn"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/keygate/keygate/policy"
)

// ErrUnavailable means the Redis keystore cannot answer for a key it has not
// cached: Redis is unreachable or slow. The gateway answers 503, never 401.
var ErrUnavailable = errors.New("keystore: key store unavailable")

// RedisConfig configures a RedisStore.
type RedisConfig struct {
	// Client is the shared Redis client (package redisconn). Required.
	Client redis.UniversalClient
	// Prefix starts every Redis key; default "keygate:".
	Prefix string
	// Logger receives reloads and outages; nil means none.
	Logger *zap.Logger
	// ResyncInterval is how often every record is re-read, covering a
	// missed change message. Default 30s.
	ResyncInterval time.Duration
	// Timeout bounds each Redis call on the request path. Default 100ms.
	Timeout time.Duration
	// BreakerFailures consecutive failures stop calls to Redis for
	// BreakerBackoff, after which one call probes it. Defaults 3 and 1s.
	BreakerFailures int
	BreakerBackoff  time.Duration
	// NegativeTTL is how long an unknown key is remembered as unknown, so
	// a flood of made-up keys costs Redis one lookup each per TTL. A change
	// message for the key clears it at once. Default 1s.
	NegativeTTL time.Duration
	// OnReload is called after each full (re)load with the number of
	// records, or the error; nil ok.
	OnReload func(keys int, err error)
	// Limits, when set, resolves each key's effective limit (its and its
	// consumer's plan and override) whenever a record or a consumer is
	// loaded or changes, into Record.Limits.
	Limits *policy.Resolver
}

// RedisStore serves key lookups from an in-process copy of the Redis
// keystore, kept current by change messages (pub/sub) and a periodic
// resync. A lookup of a known key never touches Redis; an unknown key is
// looked up once (identical concurrent misses share one lookup). While
// Redis is unreachable, known keys keep working from the copy and unknown
// keys get ErrUnavailable. It is safe for concurrent use.
type RedisStore struct {
	cfg     RedisConfig
	keys    redisKeys
	log     *zap.Logger
	snap    atomic.Pointer[map[Hash]Record]
	cons    atomic.Pointer[map[string]Consumer] // written with snap, under writeMu
	limits  limitResolver
	writeMu sync.Mutex // serializes snapshot writers
	neg     *expirable.LRU[Hash, struct{}]
	sf      singleflight.Group
	breaker *redisconn.Breaker[string]
	synced  atomic.Bool // subscribed and loaded since the last error
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	resync  chan struct{}
	pubsub  atomic.Pointer[redis.PubSub] // the live subscription, closed by Close
}

// OpenRedis starts a RedisStore. It does not fail when Redis is down at
// start: the store is then not Ready, lookups return ErrUnavailable, and it
// loads as soon as Redis answers.
func OpenRedis(cfg RedisConfig) (*RedisStore, error) {
	if cfg.Client == nil {
		return nil, errors.New("keystore: redis backend needs a Redis client")
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 30 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	if cfg.BreakerFailures <= 0 {
		cfg.BreakerFailures = 3
	}
	if cfg.BreakerBackoff <= 0 {
		cfg.BreakerBackoff = time.Second
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = time.Second
	}
	s := &RedisStore{cfg: cfg, keys: newRedisKeys(cfg.Prefix), log: cfg.Logger, resync: make(chan struct{}, 1), limits: limitResolver{cfg.Limits}}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.neg = expirable.NewLRU[Hash, struct{}](10_000, nil, cfg.NegativeTTL)
	s.breaker = redisconn.NewBreaker[string](redisconn.BreakerConfig{
		Name:     "keystore-redis",
		Failures: cfg.BreakerFailures,
		Backoff:  cfg.BreakerBackoff,
		OnStateChange: func(from, to string) {
			switch to {
			case "open":
				s.log.Warn("keystore: Redis unavailable; serving cached keys, unknown keys get 503", zap.String("from", from))
			case "closed":
				s.log.Info("keystore: Redis available again")
				s.requestResync()
			}
		},
	})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.reload(); err != nil {
		s.log.Warn("keystore: initial load from Redis failed; retrying", zap.Error(err))
	}
	s.wg.Add(2)
	go s.subscribeLoop()
	go s.resyncLoop()
	return s, nil
}

// Lookup finds a record by key hash.
func (s *RedisStore) Lookup(ctx context.Context, h Hash) (Record, bool, error) {
	if m := s.snap.Load(); m != nil {
		if r, ok := (*m)[h]; ok {
			return r, true, nil
		}
	} else {
		return Record{}, false, ErrUnavailable
	}
	if s.neg.Contains(h) {
		return Record{}, false, nil
	}
	v, err, _ := s.sf.Do(h.String(), func() (any, error) {
		rec, ok, err := s.fetch(h)
		if err != nil {
			return nil, err
		}
		if !ok {
			s.neg.Add(h, struct{}{})
			return nil, nil
		}
		s.upsert(rec)
		return rec, nil
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if v == nil {
		return Record{}, false, nil
	}
	return v.(Record), true, nil
}

// fetch reads one record from Redis through the breaker.
func (s *RedisStore) fetch(h Hash) (Record, bool, error) {
	v, err := s.breaker.Do(s.ctx, func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		return s.cfg.Client.HGet(ctx, s.keys.records, h.String()).Result()
	})
	if errors.Is(err, redis.Nil) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	rec, err := decodeRecord(h.String(), v)
	if err != nil {
		s.log.Error("keystore: bad record in Redis", zap.Error(err))
		return Record{}, false, nil
	}
	return rec, true, nil
}

// upsert puts rec in the snapshot (copy on write).
func (s *RedisStore) upsert(rec Record) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	old := s.snap.Load()
	if old == nil {
		return
	}
	m := make(map[Hash]Record, len(*old)+1)
	for k, v := range *old {
		m[k] = v
	}
	m[rec.Hash] = s.limits.resolve(rec, s.consumers(), time.Now())
	s.snap.Store(&m)
}

func (s *RedisStore) remove(h Hash) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	old := s.snap.Load()
	if old == nil {
		return
	}
	if _, ok := (*old)[h]; !ok {
		return
	}
	m := make(map[Hash]Record, len(*old))
	for k, v := range *old {
		if k != h {
			m[k] = v
		}
	}
	s.snap.Store(&m)
}

// reload replaces the snapshot with every record in Redis.
func (s *RedisStore) reload() error {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	all, cons, err := s.loadAll(ctx)
	if err != nil {
		if s.cfg.OnReload != nil {
			s.cfg.OnReload(0, err)
		}
		return err
	}
	m := make(map[Hash]Record, len(all))
	for field, value := range all {
		rec, err := decodeRecord(field, value)
		if err != nil {
			s.log.Error("keystore: skipping a bad record in Redis", zap.Error(err))
			continue
		}
		m[rec.Hash] = rec
	}
	s.limits.resolveAll(m, cons, time.Now())
	s.writeMu.Lock()
	s.cons.Store(&cons)
	s.snap.Store(&m)
	s.writeMu.Unlock()
	s.neg.Purge()
	if s.cfg.OnReload != nil {
		s.cfg.OnReload(len(m), nil)
	}
	return nil
}

// apply handles one change message.
func (s *RedisStore) apply(payload string) {
	if payload == "*" {
		s.requestResync()
		return
	}
	for _, f := range strings.Split(payload, ",") {
		if id, ok := strings.CutPrefix(f, consumerChange); ok {
			s.applyConsumer(id)
			continue
		}
		h, err := ParseHash(f)
		if err != nil {
			continue
		}
		s.neg.Remove(h)
		rec, ok, err := s.fetch(h)
		switch {
		case err != nil:
			s.requestResync()
		case ok:
			s.upsert(rec)
		default:
			s.remove(h)
		}
	}
}

func (s *RedisStore) requestResync() {
	select {
	case s.resync <- struct{}{}:
	default:
	}
}

// subscribeLoop listens for change messages. Each (re)subscription is
// followed by a full reload, since messages may have been missed while the
// connection was down.
func (s *RedisStore) subscribeLoop() {
	defer s.wg.Done()
	backoff := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		ps := s.cfg.Client.Subscribe(s.ctx, s.keys.channel)
		s.pubsub.Store(ps)
		if s.ctx.Err() != nil { // Close ran between the check and the Store
			_ = ps.Close()
			return
		}
		for s.ctx.Err() == nil {
			msg, err := ps.ReceiveTimeout(s.ctx, 30*time.Second)
			if err != nil {
				var ne interface{ Timeout() bool }
				if errors.As(err, &ne) && ne.Timeout() {
					continue // idle; go-redis pings on its own
				}
				s.synced.Store(false)
				break
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					s.synced.Store(true)
					backoff = 100 * time.Millisecond
					s.requestResync()
				}
			case *redis.Message:
				s.apply(m.Payload)
			}
		}
		_ = ps.Close()
		select {
		case <-s.ctx.Done():
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// resyncLoop re-reads everything periodically and on request.
func (s *RedisStore) resyncLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ResyncInterval)
	defer t.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.resync:
		case <-retry.C:
		}
		if err := s.reload(); err != nil {
			s.log.Warn("keystore: resync from Redis failed", zap.Error(err))
			retry.Reset(500 * time.Millisecond)
		}
	}
}

// Ready reports whether a keystore has been loaded.
func (s *RedisStore) Ready() bool { return s.snap.Load() != nil }

// Degraded reports whether Redis is unavailable to the store: lookups of
// unknown keys fail and changes may not arrive.
func (s *RedisStore) Degraded() bool {
	return !s.breaker.Closed() || !s.synced.Load()
}

// Len is the number of cached records.
func (s *RedisStore) Len() int {
	if m := s.snap.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Close stops the background work.
func (s *RedisStore) Close() error {
	s.cancel()
	if ps := s.pubsub.Load(); ps != nil {
		_ = ps.Close() // a blocked receive does not watch the context
	}
	s.wg.Wait()
	return nil
}
