package keystore

// The Redis keystore's read side: the in-process index that serves
// lookups, loaded in pages and kept current from the change log.

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/redisconn"

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
	// ResyncInterval is how often every record is re-read (a full pass,
	// in pages), covering a change that was stored but never logged (an
	// admin that died between the two). Changes themselves arrive from
	// the change log. Default 10m.
	ResyncInterval time.Duration
	// PollInterval is how often the change log is read when no message
	// wakes the store, covering a lost pub/sub message. Default 500ms.
	PollInterval time.Duration
	// Timeout bounds each Redis call on the request path. Default 100ms.
	Timeout time.Duration
	// PageSize is the COUNT of each HSCAN of a full pass, of each XRANGE
	// of the change log and the size of each pipelined batch of lookups.
	// Default 100: an HSCAN page of 100 records (about 30 KB) keeps each
	// command short, so redis-server serves every replica's limiter calls
	// between pages, for a little more CPU on a full load than larger
	// pages (go run ./bench/keyload -mode load-redis measures both).
	PageSize int
	// BreakerFailures consecutive failures stop calls to Redis for
	// BreakerBackoff, after which one call probes it. Defaults 3 and 1s.
	BreakerFailures int
	BreakerBackoff  time.Duration
	// NegativeTTL is how long an unknown key is remembered as unknown, so
	// a flood of made-up keys costs Redis one lookup each per TTL. A change
	// message for the key clears it at once. Default 1s.
	NegativeTTL time.Duration
	// OnReload is called after each full pass with the number of
	// records, or the error; nil ok.
	OnReload func(keys int, err error)
	// Limits, when set, resolves each key's effective limit (its and its
	// consumer's plan and override) whenever a record or a consumer is
	// loaded or changes, into Record.Limits.
	Limits *policy.Resolver

	// FailClosed makes lookups answer ErrUnavailable (503) while Redis
	// has lost data (see DataLoss), instead of serving the last good set.
	FailClosed bool
	// OnBlocked, when set, is called with the record as the replica keeps
	// it whenever a re-read would have reinstated a key the replica saw
	// rotated or revoked (a metric and the audit log).
	OnBlocked func(Record)
	// OnLogGap, when set, is called whenever the change log no longer
	// holds the replica's position (it re-reads everything).
	OnLogGap func()
	// OnDataLoss, when set, is called with the reason whenever the store
	// finds that Redis lost data.
	OnDataLoss func(reason string)

	// beforePage, when set (by tests), runs before each page of a full
	// pass is read.
	beforePage func()
}

// RedisStore serves key lookups from an in-process index of the Redis
// keystore (see index). It loads the key set in pages (HSCAN with a
// COUNT, several buckets at once), so no command keeps Redis busy for
// long, and then follows the change log: each change costs the records
// it names, never the key set. A pub/sub message wakes it at once; a
// poll covers a lost message; a log trimmed past its position, or an
// import, makes it re-read everything, in pages, while it keeps serving.
//
// A lookup of a known key never touches Redis; an unknown key is looked
// up once (identical concurrent misses share one lookup), including
// while the first load runs, so a starting replica serves every key
// before it is Ready. While Redis is unreachable, known keys keep working
// and unknown keys get ErrUnavailable. It is safe for concurrent use.
type RedisStore struct {
	cfg     RedisConfig
	keys    *redisKeys
	log     *zap.Logger
	idx     *index
	cons    *consumerSet
	consMu  sync.Mutex // serializes writers of cons
	limits  limitResolver
	neg     *negCache
	sf      singleflight.Group
	breaker *redisconn.Breaker[string]
	synced  atomic.Bool   // subscribed since the last error
	loaded  atomic.Bool   // a full pass has completed
	gen     atomic.Uint32 // the current full pass
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	wake    chan struct{} // catch up with the log now
	full    chan struct{} // re-read everything
	pubsub  atomic.Pointer[redis.PubSub]

	// cursor is the id of the last log entry applied; "" before the
	// first pass, "0-0" when the log was empty. Owned by syncLoop.
	cursor string
	// pending are records named by applied log entries that could not
	// be read (their node was down); each catch-up reads them again.
	// Owned by syncLoop.
	pending map[Hash]struct{}
	// epoch is the keystore epoch this replica holds; "" before the
	// first pass. Owned by syncLoop.
	epoch    string
	dataLoss atomic.Pointer[string] // see DataLoss
	tombs    tombs
	// wbMu guards writeBack, the records guard kept ended, to be written
	// back, and adminTokens, the admin tokens as of the last full pass
	// (field -> stored JSON), for a repair.
	wbMu        sync.Mutex
	writeBack   []Record
	adminTokens map[string]string
}

// OpenRedis starts a RedisStore. It does not fail when Redis is down at
// start: the store is then not Ready, lookups return ErrUnavailable, and it
// loads as soon as Redis answers.
func OpenRedis(cfg RedisConfig) (*RedisStore, error) {
	if cfg.Client == nil {
		return nil, errors.New("keystore: redis backend needs a Redis client")
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 10 * time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 100
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
	idx := newIndex()
	s := &RedisStore{
		cfg: cfg, keys: newRedisKeys(cfg.Prefix), log: cfg.Logger, idx: idx, cons: newConsumerSet(idx.strs),
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), limits: limitResolver{cfg.Limits},
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.neg = newNegCache(negCacheSize, cfg.NegativeTTL, nil)
	s.breaker = redisconn.NewBreaker[string](redisconn.BreakerConfig{
		Name:     "keystore-redis",
		Failures: cfg.BreakerFailures,
		Backoff:  cfg.BreakerBackoff,
		OnStateChange: func(from, to string) {
			// One line when Redis is lost and one when it is back, not one
			// per failed probe (open → half-open → open each back-off).
			switch {
			case from == "closed":
				s.log.Warn("keystore: Redis unavailable; serving cached keys, unknown keys get 503")
			case to == "closed":
				s.log.Info("keystore: Redis available again")
				s.signal(s.wake)
			}
		},
	})
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(2)
	go s.subscribeLoop()
	go s.syncLoop()
	return s, nil
}

// Lookup finds a record by key hash. The record carries what the request
// path reads; CreatedAt, RevokedAt and ReplacedBy are left zero (the
// admin side reads them from Redis).
func (s *RedisStore) Lookup(ctx context.Context, h Hash) (Record, bool, error) {
	if s.cfg.FailClosed && s.dataLoss.Load() != nil {
		return Record{}, false, fmt.Errorf("%w: Redis lost keystore data (keystore.on_data_loss: fail_closed)", ErrUnavailable)
	}
	if r, ok := s.idx.get(h); ok {
		return r, true, nil
	}
	return s.lookupMiss(ctx, h)
}

// lookupMiss looks up, in Redis, a hash the index does not hold.
func (s *RedisStore) lookupMiss(ctx context.Context, h Hash) (Record, bool, error) {
	if s.neg.Contains(h) {
		return Record{}, false, nil
	}
	v, err, _ := s.sf.Do(h.String(), func() (any, error) {
		rec, ok, err := s.fetch(h)
		if err != nil {
			return nil, err
		}
		if !ok {
			s.neg.Add(h)
			return nil, nil
		}
		return s.put(rec), nil
	})
	if err != nil {
		return Record{}, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if v == nil {
		return Record{}, false, nil
	}
	// The record as the index serves it, so that this lookup gets what
	// the next one, which the index answers, will.
	return s.idx.record(h, v.(*entry)), true, nil
}

// put resolves rec's limits and stores it in the index, marked as seen
// by the current pass; it returns the index's entry.
func (s *RedisStore) put(rec Record) *entry {
	rec = s.guard(rec)
	c, ok := s.cons.get(rec.Consumer)
	if !ok && rec.Consumer != "" && !s.loaded.Load() {
		// The first pass has not read the consumers yet: read this one.
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
		var err error
		c, err = getConsumer(ctx, s.cfg.Client, s.keys, rec.Consumer)
		cancel()
		ok = err == nil
	}
	var con *Consumer
	if ok {
		con = &c
	}
	rec = s.limits.resolveFor(rec, con, time.Now())
	return s.idx.put(rec, s.gen.Load())
}

// fetch reads one record from Redis through the breaker.
func (s *RedisStore) fetch(h Hash) (Record, bool, error) {
	field := h.String()
	v, err := s.breaker.Do(s.ctx, func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		return s.cfg.Client.HGet(ctx, s.keys.recordsOf(h), field).Result()
	})
	if errors.Is(err, redis.Nil) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	rec, err := decodeRecord(field, v)
	if err != nil {
		s.log.Error("keystore: bad record in Redis", zap.Error(err))
		return Record{}, false, nil
	}
	return rec, true, nil
}

// fetchMany reads the records of hs in pipelined round trips through the
// breaker, and applies each: stores it, or removes it when it is gone.
// It returns the hashes it could not read, and the first error: in a
// Cluster, a node that is down fails only the records in its slots, and
// the others are applied all the same.
func (s *RedisStore) fetchMany(hs []Hash) (failed []Hash, first error) {
	fail := func(h Hash, err error) {
		failed = append(failed, h)
		if first == nil {
			first = err
		}
	}
	for start := 0; start < len(hs); start += s.cfg.PageSize {
		page := hs[start:min(start+s.cfg.PageSize, len(hs))]
		cmds := make([]*redis.StringCmd, len(page))
		_, err := s.breaker.Do(s.ctx, func(ctx context.Context) (string, error) {
			ctx, cancel := context.WithTimeout(ctx, s.pageTimeout())
			defer cancel()
			_, err := s.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, h := range page {
					cmds[i] = p.HGet(ctx, s.keys.recordsOf(h), h.String())
				}
				return nil
			})
			if err != nil {
				// Redis answered when any command got an answer: only
				// a page that failed whole counts against the breaker.
				for _, c := range cmds {
					if c != nil && (c.Err() == nil || errors.Is(c.Err(), redis.Nil)) {
						return "", nil
					}
				}
			}
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			return "", err
		})
		if err != nil {
			for _, h := range page {
				fail(h, err)
			}
			continue
		}
		for i, h := range page {
			v, err := cmds[i].Result()
			switch {
			case errors.Is(err, redis.Nil):
				s.neg.Remove(h)
				s.idx.del(h)
			case err != nil:
				fail(h, err)
			default:
				s.neg.Remove(h)
				rec, err := decodeRecord(h.String(), v)
				if err != nil {
					s.log.Error("keystore: bad record in Redis", zap.Error(err))
					s.idx.del(h)
					continue
				}
				s.put(rec)
			}
		}
	}
	return failed, first
}

func (s *RedisStore) pageTimeout() time.Duration { return max(10*s.cfg.Timeout, time.Second) }

func (s *RedisStore) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// errLogGap means the change log no longer holds the store's position:
// it was trimmed past it, or Redis lost it.
var errLogGap = errors.New("keystore: the change log no longer holds this replica's position")

// syncLoop runs the full passes and the catch-ups with the change log,
// one at a time, except that catch-ups keep running while a full pass
// does.
func (s *RedisStore) syncLoop() {
	defer s.wg.Done()
	poll := time.NewTicker(s.cfg.PollInterval)
	defer poll.Stop()
	resync := time.NewTicker(s.cfg.ResyncInterval)
	defer resync.Stop()
	needFull := true
	backoff := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		if needFull {
			if err := s.fullPass(poll.C); err != nil {
				if s.ctx.Err() != nil {
					return
				}
				s.log.Warn("keystore: full read of Redis failed; retrying", zap.Error(err))
				if s.cfg.OnReload != nil {
					s.cfg.OnReload(0, err)
				}
				s.sleep(backoff)
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			needFull = false
			backoff = 100 * time.Millisecond
		}
		switch err := s.catchUp(); {
		case errors.Is(err, errLogGap):
			s.log.Warn("keystore: lost this replica's position in the change log (trimmed, or Redis lost it); re-reading every record", zap.Error(err))
			if s.cfg.OnLogGap != nil {
				s.cfg.OnLogGap()
			}
			needFull = true
			continue
		case err != nil && s.ctx.Err() == nil:
			s.log.Warn("keystore: reading the change log failed; retrying", zap.Error(err))
			// At most a poll interval apart: a Redis failover completes in
			// seconds, and a revocation made just after it must not wait
			// for a long back-off (one XRANGE per retry is cheap).
			s.sleep(min(backoff, s.cfg.PollInterval))
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		s.flushWriteBack()
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-poll.C:
		case <-s.full:
			needFull = true
		case <-resync.C:
			needFull = true
		}
	}
}

func (s *RedisStore) sleep(d time.Duration) {
	select {
	case <-s.ctx.Done():
	case <-time.After(d):
	}
}

// fullPass reads every consumer and record, in pages, into the index,
// then removes what it did not see, and then catches up with the log
// from where it stood when the pass began (a change made during the
// pass may have been overwritten by the pass's older copy). It keeps
// catching up with the log while the pages load.
func (s *RedisStore) fullPass(poll <-chan time.Time) error {
	started := time.Now()
	ctx := s.ctx
	pctx, cancel := context.WithTimeout(ctx, s.pageTimeout())
	last, err := s.cfg.Client.XRevRangeN(pctx, s.keys.log, "+", "-", 1).Result()
	var epoch string
	if err == nil {
		epoch, err = s.cfg.Client.Get(pctx, s.keys.epoch).Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
	}
	if err == nil {
		// Before any write of this pass: a Redis that came back empty
		// and refuses writes (out of memory, read-only) is still found
		// to have lost its data.
		err = s.checkEpoch(pctx, epoch)
	}
	if err == nil && len(last) == 0 {
		// An empty log has no entry to hold the position: start one.
		var id string
		id, err = s.cfg.Client.XAdd(pctx, &redis.XAddArgs{Stream: s.keys.log, MaxLen: redisLogLen, Approx: true, Values: []string{"c", ""}}).Result()
		last = []redis.XMessage{{ID: id}}
	}
	if err == nil {
		err = s.readAdminTokens(pctx)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	from := last[0].ID
	cons, err := s.readConsumers(ctx)
	if err != nil {
		return err
	}
	s.consMu.Lock()
	s.cons.replace(cons)
	s.consMu.Unlock()

	if !s.loaded.Load() {
		s.reserve(ctx)
	}
	gen := s.gen.Add(1)
	buckets := make(chan string, redisBuckets)
	for _, b := range s.keys.records {
		buckets <- b
	}
	close(buckets)
	const workers = 8 // pages are round-trip bound: keep several in flight
	errs := make(chan error, workers)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	for range workers {
		go func() {
			var err error
			for b := range buckets {
				if err = s.loadBucket(pctx, b); err != nil {
					stop()
					break
				}
			}
			errs <- err
		}()
	}
	var firstErr error
	for done := 0; done < workers; {
		select {
		case err := <-errs:
			done++
			if err != nil && firstErr == nil {
				firstErr = err
			}
		case <-s.wake:
			if s.cursor != "" {
				_ = s.catchUp() // errors show at the catch-up after the pass
			}
		case <-poll:
			if s.cursor != "" {
				_ = s.catchUp()
			}
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if held := s.idx.len(); s.loaded.Load() && bigDrop(s.idx.stale(gen), held) {
		// Keep them all, and put back in Redis what it lost.
		s.setDataLoss(fmt.Sprintf("a re-read of Redis would drop %d of the %d keys this replica holds", s.idx.stale(gen), held))
		if err := s.repair(s.epoch); err != nil {
			return err
		}
		s.signal(s.full)
		s.cursor = from
		return nil
	}
	removed := s.idx.sweep(gen)
	clear(s.pending) // the pass read them
	s.cursor = from
	n := s.idx.len()
	first := !s.loaded.Swap(true)
	s.neg.Purge()
	s.log.Info("keystore: read every record from Redis", zap.Int("keys", n), zap.Int("removed", removed),
		zap.Duration("took", time.Since(started)), zap.Bool("first", first))
	if s.cfg.OnReload != nil {
		s.cfg.OnReload(n, nil)
	}
	if first && n >= bigFirstLoad {
		// The pages, the decoded records and consumers are garbage
		// about the size of what the index keeps; the runtime would hand
		// that memory back to the OS over minutes.
		go debug.FreeOSMemory()
	}
	return nil
}

// bigFirstLoad is the number of keys past which a replica hands the
// first load's garbage back to the OS at once.
const bigFirstLoad = 100_000

// reserve sizes the index for the records in Redis (HLEN of each
// bucket, one pipelined round trip), before the first load.
func (s *RedisStore) reserve(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.pageTimeout())
	defer cancel()
	lens := make([]*redis.IntCmd, redisBuckets)
	_, err := s.cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range s.keys.records {
			lens[i] = p.HLen(ctx, b)
		}
		return nil
	})
	if err != nil {
		return // the index grows as it loads
	}
	total := 0
	for _, l := range lens {
		total += int(l.Val())
	}
	s.idx.reserve(total)
}

// loadBucket reads one hash of records, a page at a time, into the index
// as seen by the current pass. A page that fails is tried again a few
// times, from the same cursor.
func (s *RedisStore) loadBucket(ctx context.Context, key string) error {
	var cursor uint64
	for {
		var kv []string
		var next uint64
		var err error
		if s.cfg.beforePage != nil {
			s.cfg.beforePage()
		}
		for attempt := 0; attempt < 4; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, s.pageTimeout())
			kv, next, err = s.cfg.Client.HScan(pctx, key, cursor, "", int64(s.cfg.PageSize)).Result()
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("keystore: reading %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			rec, err := decodeRecord(kv[i], kv[i+1])
			if err != nil {
				s.log.Error("keystore: skipping a bad record in Redis", zap.Error(err))
				continue
			}
			s.put(rec)
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// maxPending is how many records may wait for a re-read before the
// store re-reads everything instead.
const maxPending = 10_000

// retryLater keeps the hashes whose records could not be read, to read them
// again at the next catch-up.
func (s *RedisStore) retryLater(failed []Hash, err error) {
	if len(failed) == 0 {
		return
	}
	if s.pending == nil {
		s.pending = make(map[Hash]struct{}, len(failed))
	}
	if len(s.pending) == 0 {
		s.log.Warn("keystore: some changed records cannot be read from Redis; serving their previous state and retrying", zap.Int("records", len(failed)), zap.Error(err))
	}
	for _, h := range failed {
		s.pending[h] = struct{}{}
	}
	if len(s.pending) > maxPending {
		clear(s.pending)
		s.signal(s.full)
	}
}

// retryPending reads again the records that could not be read before.
func (s *RedisStore) retryPending() {
	if len(s.pending) == 0 {
		return
	}
	hs := make([]Hash, 0, len(s.pending))
	for h := range s.pending {
		hs = append(hs, h)
	}
	failed, _ := s.fetchMany(hs)
	clear(s.pending)
	for _, h := range failed {
		s.pending[h] = struct{}{}
	}
	if len(s.pending) == 0 {
		s.log.Info("keystore: every changed record read again", zap.Int("records", len(hs)))
	}
}

// catchUp applies the change log from the store's position on, a page
// at a time, after reading again the records that failed before.
func (s *RedisStore) catchUp() error {
	s.retryPending()
	for s.cursor != "" {
		ctx, cancel := context.WithTimeout(s.ctx, s.pageTimeout())
		// The range starts at the position itself: finding it proves
		// that nothing after it was trimmed.
		msgs, err := s.cfg.Client.XRangeN(ctx, s.keys.log, s.cursor, "+", int64(s.cfg.PageSize)+1).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		if len(msgs) == 0 || msgs[0].ID != s.cursor {
			return errLogGap
		}
		msgs = msgs[1:]
		if len(msgs) == 0 {
			return nil
		}
		var hs []Hash
		var cons []string
		all := false
		for _, m := range msgs {
			items, _ := m.Values["c"].(string)
			for _, f := range strings.Split(items, ",") {
				if id, ok := strings.CutPrefix(f, consumerChange); ok {
					cons = append(cons, id)
				} else if f == "*" {
					all = true
				} else if h, err := ParseHash(f); err == nil {
					hs = append(hs, h)
				}
			}
		}
		for _, id := range cons {
			if err := s.applyConsumer(id); err != nil {
				return err
			}
		}
		// A record that cannot be read now (its Cluster slot is failing
		// over) waits in pending, and the log moves on: one failed
		// fetch must not hold back every other change, a revocation
		// among them.
		failed, err := s.fetchMany(hs)
		s.retryLater(failed, err)
		s.cursor = msgs[len(msgs)-1].ID
		if all {
			s.signal(s.full)
		}
		if len(msgs) < s.cfg.PageSize {
			return nil
		}
	}
	return nil
}

// subscribeLoop listens for change messages, each of which wakes the
// catch-up with the log.
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
					s.signal(s.wake)
				}
			case *redis.Message:
				s.signal(s.wake)
			}
		}
		_ = ps.Close()
		// Capped at the poll interval: changes are polled meanwhile, but a
		// prompt resubscription after a failover keeps them immediate.
		s.sleep(min(backoff, s.cfg.PollInterval))
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// ConsumerKeys returns the hashes of every key of consumer the store
// holds (active, revoked, expired or rotated alike), from its index, as
// current as the change log it follows. ok is false before the first
// full pass has completed, when the index may lack some: the caller then
// reads the store itself.
func (s *RedisStore) ConsumerKeys(consumer string) (hs []Hash, ok bool) {
	if !s.loaded.Load() {
		return nil, false
	}
	return s.idx.consumerHashes(consumer), true
}

// Ready reports whether the first full pass has completed. Before it,
// lookups already answer (a miss asks Redis).
func (s *RedisStore) Ready() bool { return s.loaded.Load() }

// Degraded reports whether Redis is unavailable to the store: lookups of
// unknown keys fail and changes may not arrive.
func (s *RedisStore) Degraded() bool {
	return !s.breaker.Closed() || !s.synced.Load() || s.dataLoss.Load() != nil
}

// Len is the number of cached records.
func (s *RedisStore) Len() int { return s.idx.len() }

// Close stops the background work and waits for it to end: the store
// holds no goroutine after it (its cache of unknown keys runs none).
// The Redis client is the caller's to close.
func (s *RedisStore) Close() error {
	s.cancel()
	if ps := s.pubsub.Load(); ps != nil {
		_ = ps.Close() // a blocked receive does not watch the context
	}
	s.wg.Wait()
	return nil
}
