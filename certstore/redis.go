// Package certstore keeps certmagic's certificates, keys, ACME accounts and
// locks in Redis, so that every keygate replica behind a load balancer shares
// one certificate store and one set of distributed locks (see certmagic's
// README, "Behind a load balancer").
//
// Layout: every key lives under one Redis hash tag, so all of them hash to
// the same Cluster slot and the multi-key operations below (a MULTI/EXEC
// store, a Lua delete) work on a Redis Cluster as well as on a single server
// or a Sentinel set-up. The data is small (a few kilobytes per certificate),
// so one slot is no burden.
//
//	<prefix>{certmagic}/d/<key>     hash: v = value, m = modified (unix ms)
//	<prefix>{certmagic}/idx         sorted set of every stored key (score 0),
//	                                walked with ZRANGEBYLEX for List/Exists
//	<prefix>{certmagic}/lock/<name> lock token (SET NX PX), refreshed while held
package certstore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Interface checks: Redis is a full certmagic storage backend, with the
// optional non-blocking lock and lease renewal.
var (
	_ certmagic.Storage          = (*Redis)(nil)
	_ certmagic.TryLocker        = (*Redis)(nil)
	_ certmagic.LockLeaseRenewer = (*Redis)(nil)
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "keygate:certmagic:"

// Options configures a Redis storage. The zero value is usable: every field
// has a default.
type Options struct {
	// Prefix starts every Redis key; default DefaultPrefix. Replicas that
	// share certificates must use the same prefix.
	Prefix string
	// LockTTL is how long a lock outlives its holder: the holder refreshes
	// it every LockTTL/3, so a crashed holder's lock expires within LockTTL.
	// Default 45 s.
	LockTTL time.Duration
	// LockPoll is the first wait between attempts to take a held lock; it
	// doubles (with jitter) up to LockPollMax. Defaults 100 ms and 2 s.
	LockPoll    time.Duration
	LockPollMax time.Duration
	// Logger receives lock refresh failures; nil means no logging.
	Logger *zap.Logger
}

// Redis is a certmagic.Storage on a go-redis UniversalClient (a single
// client, a Sentinel failover client or a Cluster client). Build it with
// NewRedis; the zero value is not usable. It is safe for concurrent use.
//
// Locks are distributed: they exclude every other Redis value that uses the
// same prefix and server, in any process, as well as other goroutines of
// the same value.
type Redis struct {
	client  redis.UniversalClient
	base    string // <prefix>{certmagic}/
	idx     string
	ttl     time.Duration
	poll    time.Duration
	pollMax time.Duration
	logger  *zap.Logger

	mu    sync.Mutex
	held  map[string]*heldLock // by lock name
	ident string
}

type heldLock struct {
	token string
	stop  context.CancelFunc
	done  chan struct{}
}

// NewRedis returns a storage on client. It does not contact Redis.
func NewRedis(client redis.UniversalClient, opts Options) (*Redis, error) {
	if client == nil {
		return nil, errors.New("certstore: nil redis client")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.LockTTL == 0 {
		opts.LockTTL = 45 * time.Second
	}
	if opts.LockTTL < 30*time.Millisecond {
		return nil, fmt.Errorf("certstore: LockTTL %v is too short", opts.LockTTL)
	}
	if opts.LockPoll <= 0 {
		opts.LockPoll = 100 * time.Millisecond
	}
	if opts.LockPollMax < opts.LockPoll {
		opts.LockPollMax = max(2*time.Second, opts.LockPoll)
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	base := opts.Prefix + "{certmagic}/"
	return &Redis{
		client:  client,
		base:    base,
		idx:     base + "idx",
		ttl:     opts.LockTTL,
		poll:    opts.LockPoll,
		pollMax: opts.LockPollMax,
		logger:  opts.Logger,
		held:    make(map[string]*heldLock),
		ident:   "redis:" + opts.Prefix,
	}, nil
}

// String identifies the storage in certmagic's logs.
func (s *Redis) String() string { return s.ident }

// norm turns a storage key into its canonical form: slash-separated, no
// leading, trailing or doubled slashes; "" is the root.
func norm(key string) string {
	return strings.TrimPrefix(path.Clean("/"+key), "/")
}

func (s *Redis) dataKey(key string) string  { return s.base + "d/" + key }
func (s *Redis) lockKey(name string) string { return s.base + "lock/" + name }

// Store puts value at key, creating or overwriting it.
func (s *Redis) Store(ctx context.Context, key string, value []byte) error {
	key = norm(key)
	if key == "" {
		return errors.New("certstore: empty key")
	}
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.dataKey(key), "v", value, "m", time.Now().UnixMilli())
		p.ZAdd(ctx, s.idx, redis.Z{Member: key})
		return nil
	})
	if err != nil {
		return fmt.Errorf("certstore: store %q: %w", key, err)
	}
	return nil
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist when
// there is no value there (certmagic relies on that to tell "missing" from
// "broken").
func (s *Redis) Load(ctx context.Context, key string) ([]byte, error) {
	key = norm(key)
	v, err := s.client.HGet(ctx, s.dataKey(key), "v").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("certstore: load %q: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("certstore: load %q: %w", key, err)
	}
	return v, nil
}

// deleteScript removes a key and everything under it ("key/..."), from the
// data hashes and the index, atomically. KEYS[1] is the index; ARGV[1] the
// data key prefix, ARGV[2] the key, which must not be empty (the root).
var deleteScript = redis.NewScript(`
local idx, dprefix, key = KEYS[1], ARGV[1], ARGV[2]
if key == "" then
  return redis.error_reply("empty key")
end
local members = redis.call("ZRANGEBYLEX", idx, "[" .. key .. "/", "(" .. key .. "/\255")
table.insert(members, key)
for i = 1, #members, 500 do
  local chunk_idx, chunk_data = {}, {}
  for j = i, math.min(i + 499, #members) do
    chunk_idx[#chunk_idx + 1] = members[j]
    chunk_data[#chunk_data + 1] = dprefix .. members[j]
  end
  redis.call("DEL", unpack(chunk_data))
  redis.call("ZREM", idx, unpack(chunk_idx))
end
return #members
`)

// Delete removes key and, as FileStorage does for a directory, every key
// under it. Deleting a missing key is not an error. A key that names the
// root ("", "/") is refused, as Store refuses it: it would delete the
// whole store.
func (s *Redis) Delete(ctx context.Context, key string) error {
	key = norm(key)
	if key == "" {
		return errors.New("certstore: delete: empty key (the whole store)")
	}
	if err := deleteScript.Run(ctx, s.client, []string{s.idx}, s.base+"d/", key).Err(); err != nil {
		return fmt.Errorf("certstore: delete %q: %w", key, err)
	}
	return nil
}

// isTerminal reports whether a value is stored at key.
func (s *Redis) isTerminal(ctx context.Context, key string) (bool, error) {
	n, err := s.client.Exists(ctx, s.dataKey(key)).Result()
	return n > 0, err
}

// isDir reports whether any key is stored under key ("key/...").
func (s *Redis) isDir(ctx context.Context, key string) (bool, error) {
	lo, hi := "-", "+"
	if key != "" {
		lo, hi = "["+key+"/", "("+key+"/\xff"
	}
	m, err := s.client.ZRangeByLex(ctx, s.idx, &redis.ZRangeBy{Min: lo, Max: hi, Count: 1}).Result()
	return len(m) > 0, err
}

// Exists reports whether key holds a value or is the "directory" of other
// keys, as FileStorage does. Unlike a file system, Redis keeps no empty
// directories: a directory exists while some value is stored below it. A
// Redis error reads as false.
func (s *Redis) Exists(ctx context.Context, key string) bool {
	key = norm(key)
	if ok, err := s.isTerminal(ctx, key); err == nil && ok {
		return true
	}
	ok, err := s.isDir(ctx, key)
	return err == nil && ok
}

// Stat describes key: a stored value (IsTerminal, with size and
// modification time) or a directory of other keys (IsTerminal false, zero
// time). A missing key gives an error wrapping fs.ErrNotExist.
func (s *Redis) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	key = norm(key)
	var mod *redis.StringCmd
	var size *redis.IntCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		mod = p.HGet(ctx, s.dataKey(key), "m")
		size = p.HStrLen(ctx, s.dataKey(key), "v")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return certmagic.KeyInfo{}, fmt.Errorf("certstore: stat %q: %w", key, err)
	}
	if ms, err := mod.Int64(); err == nil {
		return certmagic.KeyInfo{
			Key:        key,
			Modified:   time.UnixMilli(ms),
			Size:       size.Val(),
			IsTerminal: true,
		}, nil
	}
	dir, err := s.isDir(ctx, key)
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("certstore: stat %q: %w", key, err)
	}
	if !dir {
		return certmagic.KeyInfo{}, fmt.Errorf("certstore: stat %q: %w", key, fs.ErrNotExist)
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// List returns the keys under prefix with FileStorage's semantics: without
// recursive, the direct children (values and directories); with recursive,
// every value and every directory below prefix. A prefix that holds a
// value but nothing below lists as empty; a prefix that does not exist at
// all gives an error wrapping fs.ErrNotExist. Keys come in the order of a
// depth-first walk, as FileStorage returns them.
func (s *Redis) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	prefix = norm(prefix)
	lo, hi := "-", "+"
	if prefix != "" {
		lo, hi = "["+prefix+"/", "("+prefix+"/\xff"
	}
	var members []string
	var offset int64
	const page = 1000
	for {
		m, err := s.client.ZRangeByLex(ctx, s.idx, &redis.ZRangeBy{Min: lo, Max: hi, Offset: offset, Count: page}).Result()
		if err != nil {
			return nil, fmt.Errorf("certstore: list %q: %w", prefix, err)
		}
		members = append(members, m...)
		if len(m) < page {
			break
		}
		offset += page
	}
	if len(members) == 0 {
		ok, err := s.isTerminal(ctx, prefix)
		if err != nil {
			return nil, fmt.Errorf("certstore: list %q: %w", prefix, err)
		}
		if !ok && prefix != "" {
			return nil, fmt.Errorf("certstore: list %q: %w", prefix, fs.ErrNotExist)
		}
		return nil, nil
	}
	seen := make(map[string]struct{}, len(members))
	var keys []string
	add := func(k string) {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			keys = append(keys, k)
		}
	}
	cut := 0
	if prefix != "" {
		cut = len(prefix) + 1
	}
	for _, m := range members {
		rest := m[cut:]
		if !recursive {
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				rest = rest[:i]
			}
			add(m[:cut] + rest)
			continue
		}
		for i := 0; i < len(rest); i++ {
			if rest[i] == '/' {
				add(m[:cut+i])
			}
		}
		add(m)
	}
	// Depth-first order: compare path components, i.e. '/' sorts first.
	slices.SortFunc(keys, func(a, b string) int {
		return strings.Compare(strings.ReplaceAll(a, "/", "\x00"), strings.ReplaceAll(b, "/", "\x00"))
	})
	return keys, nil
}

// unlockScript deletes the lock only if it still holds our token.
var unlockScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
`)

// refreshScript extends the lock only if it still holds our token.
var refreshScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
`)

func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TryLock takes the named lock if it is free and reports whether it did.
func (s *Redis) TryLock(ctx context.Context, name string) (bool, error) {
	token := newToken()
	ok, err := s.client.SetNX(ctx, s.lockKey(name), token, s.ttl).Result()
	if err != nil {
		return false, fmt.Errorf("certstore: lock %q: %w", name, err)
	}
	if !ok {
		return false, nil
	}
	s.startRefresh(name, token)
	return true, nil
}

// Lock takes the named lock, waiting (with back-off) while another holder
// has it, until ctx ends. A holder that dies without unlocking stops
// refreshing its lock, which then expires within Options.LockTTL.
func (s *Redis) Lock(ctx context.Context, name string) error {
	wait := s.poll
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		jittered := wait/2 + rand.N(wait/2+1)
		t := time.NewTimer(jittered)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("certstore: lock %q: %w", name, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, s.pollMax)
	}
}

func (s *Redis) startRefresh(name, token string) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &heldLock{token: token, stop: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if old, ok := s.held[name]; ok {
		// Only possible if the previous holder's lock expired while it
		// was still held here; stop its refresher, ours takes over.
		old.stop()
	}
	s.held[name] = h
	s.mu.Unlock()
	go func() {
		defer close(h.done)
		tick := time.NewTicker(s.ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, s.ttl/3)
			n, err := refreshScript.Run(rctx, s.client, []string{s.lockKey(name)}, token, s.ttl.Milliseconds()).Int()
			rcancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.logger.Warn("certstore: refreshing lock", zap.String("lock", name), zap.Error(err))
				continue
			}
			if n == 0 {
				s.logger.Error("certstore: lock lost (expired or taken over)", zap.String("lock", name))
				return
			}
		}
	}()
}

// Unlock releases a lock taken by this value. It deletes the Redis key only
// if it still holds this value's token, so a lock that expired and was
// taken by another holder is left alone.
func (s *Redis) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h, ok := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("certstore: unlock %q: not held by this storage", name)
	}
	h.stop()
	<-h.done
	if err := unlockScript.Run(ctx, s.client, []string{s.lockKey(name)}, h.token).Err(); err != nil {
		return fmt.Errorf("certstore: unlock %q: %w", name, err)
	}
	return nil
}

// RenewLockLease extends a lock held by this value to leaseDuration from
// now (certmagic calls it around long operations).
func (s *Redis) RenewLockLease(ctx context.Context, name string, leaseDuration time.Duration) error {
	s.mu.Lock()
	h, ok := s.held[name]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("certstore: renew lock %q: not held by this storage", name)
	}
	n, err := refreshScript.Run(ctx, s.client, []string{s.lockKey(name)}, h.token, leaseDuration.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("certstore: renew lock %q: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("certstore: renew lock %q: lock lost", name)
	}
	return nil
}
