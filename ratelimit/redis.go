package ratelimit

import (
	"github.com/keygate/keygate/policy"

	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// gcra decides requests in one atomic step each: a GCRA token bucket (one
// theoretical arrival time, "tat", per id, as in go-redis/redis_rate) and
// a fixed-window quota counter. Time comes from the Redis server, so the
// replicas' clocks do not matter. Nothing is written for a request unless
// it is admitted by both the bucket and the quota.
//
// One call decides one or more requests, in order, at one server time:
// the decisions a replica has in flight together go in one call on a
// single Redis (or a Sentinel-managed one), which saves Redis the script
// call's own overhead and its TIME for every decision after the first.
// Two requests of one id in one call are decided one after the other, as
// two calls would decide them. The caller puts an id's requests next to
// each other: the id's keys are then read at its first request and
// written after its last, so a busy key costs Redis the same reads and
// writes a call however many of its requests the call decides. A write
// that fails fails the whole call: nothing is admitted unwritten.
//
// A request may ask for several cells at once (a lease: see Leases): it
// gets as many as the bucket and the quota allow, up to what it asked for,
// and at least one or none, as one request would.
//
// Requests of one id with the same limit and the same cells wanted go as
// one group: the id's keys and the limit are sent, and parsed, once, and
// the group's count says how many requests it decides. (A call of seven
// requests of one busy key carried 14 keys and 35 arguments, each a
// string Redis parses, allocates and hands to Lua, and 35 numbers Lua
// parses; now 2 keys and 6.)
//
// KEYS: for each group, its id's bucket key and quota key (same hash
// slot). ARGV: for each group, burst, emission interval in µs, quota
// requests (0 = none), quota period in ms, cells wanted by each request
// (1 or more), and the number of requests (1 or more). Reply: for each
// request, in order, seven values: cells granted (0 = refused),
// reason (0 none, 1 rate, 2 quota), bucket remaining, retry-after µs,
// bucket reset µs, quota remaining, quota reset µs, remaining counted
// after every cell granted. A request whose keys Redis cannot use
// (say, a key of another type written there by hand) gets allowed -1 and
// fails alone, not the others decided in the same call.
var gcra = redis.NewScript(`
local t = redis.call('TIME')
local now = (tonumber(t[1]) - 1483228800) * 1000000 + tonumber(t[2])
local out = {}

-- The state of the id being decided: its keys are read at its first
-- request and written after its last (the caller puts an id's requests
-- next to each other).
local bkey, qkey, loaded, tat, written
local qused, qttl, qexp, qper, qadd = nil, 0, false, 0, 0

-- tat goes as a number: Redis writes it with %.17g, every digit the
-- number holds and no exponent at this magnitude, which every build
-- reads back (a string.format of its own cost the script more).
local function flush()
  if written then
    redis.call('SET', bkey, tat, 'PX', math.ceil((tat - now) / 1000) + 1)
  end
  if qadd > 0 then
    redis.call('INCRBY', qkey, qadd)
    if qexp then redis.call('PEXPIRE', qkey, qper) end
  end
end

local function decide(burst, interval, qlimit, qperiod, want)
  if not loaded then
    tat = tonumber(redis.call('GET', bkey)) or now
    loaded = true
  end
  local t0 = tat
  if t0 < now then t0 = now end
  local diff = now - (t0 + interval - interval * burst)

  local used, ttl = 0, qperiod
  if qlimit > 0 then
    if qused == nil then
      local n = tonumber(redis.call('GET', qkey)) or 0
      qttl, qexp = qperiod, true
      if n > 0 then
        local pttl = redis.call('PTTL', qkey)
        if pttl >= 0 then qttl, qexp = pttl, false end
      end
      qused = n
    end
    used, ttl = qused, qttl
    if used >= qlimit then
      local retry = ttl * 1000
      if -diff > retry then retry = -diff end
      return 0, 2, 0, math.ceil(retry), math.ceil(retry), 0, ttl * 1000
    end
  end

  if diff < 0 then
    return 0, 1, 0, math.ceil(-diff), math.ceil(t0 - now), qlimit - used, ttl * 1000
  end

  -- Cells the bucket holds (this one and floor(diff / interval) more),
  -- and the quota has left, up to want.
  local rem = math.floor(diff / interval + 0.000001)
  local n = want
  if n > rem + 1 then n = rem + 1 end
  if qlimit > 0 and n > qlimit - used then n = qlimit - used end
  tat, written = t0 + n * interval, true
  local qrem = 0
  if qlimit > 0 then
    qused, qadd = used + n, qadd + n
    if qexp then qttl, qper, ttl = qperiod, qperiod, qperiod end
    qrem = qlimit - qused
  end
  return n, 0, rem - (n - 1), 0, math.ceil(tat - now), qrem, ttl * 1000
end

local o = 0
for i = 1, #KEYS / 2 do
  if KEYS[2*i-1] ~= bkey then
    if bkey then flush() end
    bkey, qkey, loaded, written, qused, qadd = KEYS[2*i-1], KEYS[2*i], false, false, nil, 0
  end
  local a = 6 * (i - 1)
  local burst, interval, qlimit, qperiod, want = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4]), tonumber(ARGV[a+5])
  for _ = 1, tonumber(ARGV[a+6]) do
    local ok, r1, r2, r3, r4, r5, r6, r7 = pcall(decide, burst, interval, qlimit, qperiod, want)
    if not ok then r1, r2, r3, r4, r5, r6, r7 = -1, 0, 0, 0, 0, 0, 0 end
    out[o+1], out[o+2], out[o+3], out[o+4], out[o+5], out[o+6], out[o+7] = r1, r2, r3, r4, r5, r6, r7
    o = o + 7
  end
end
if bkey then flush() end
return out
`)

// RedisConfig configures a Redis limiter. Only Client is required.
type RedisConfig struct {
	// Client runs the script. It should have ContextTimeoutEnabled set
	// (redisconn.New does) so that Timeout bounds each call.
	Client Client
	// KeyPrefix starts every key; "" means DefaultKeyPrefix.
	KeyPrefix string
	// Timeout bounds each Redis call; zero means DefaultRedisTimeout.
	Timeout time.Duration
}

// Redis is a rate limiter whose state lives in Redis, shared by every
// replica: at most one atomic script call (EVALSHA) per decision. The
// decisions of requests in flight at the same moment share one call on a
// single Redis, or one pipeline of calls on a Cluster or Ring. It
// answers a decision or an error, nothing else: compose it with a
// fallback in a Resilient for outages. Build it with NewRedis; it is safe
// for concurrent use.
type Redis struct {
	bucketPrefix string
	quotaPrefix  string
	timeout      time.Duration
	batch        *batcher
}

// NewRedis returns a Redis limiter. It tries to load the script into
// Redis; a Redis that is down at start is not an error.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("ratelimit: RedisConfig.Client is nil")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRedisTimeout
	}
	r := &Redis{
		bucketPrefix: cfg.KeyPrefix + "rl:{",
		quotaPrefix:  cfg.KeyPrefix + "q:{",
		timeout:      cfg.Timeout,
	}
	// Only a single Redis holds every key: a Cluster or a Ring may hold
	// two ids' keys in two slots, which one script cannot touch.
	_, single := cfg.Client.(*redis.Client)
	r.batch = &batcher{client: cfg.Client, combine: single}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	_ = gcra.Load(ctx, cfg.Client).Err() // only saves the first EVAL
	return r, nil
}

// Allow decides whether the request of id may proceed under lim, in
// Redis. id is the key's public id, never the key; it is the only thing
// the Redis keys are made of. An error is ErrInvalid for a bad id or
// lim, or Redis's (or the context's).
func (r *Redis) Allow(ctx context.Context, id string, lim policy.Limit) (Decision, error) {
	if err := check(id, lim); err != nil {
		return Decision{}, err
	}
	d, _, err := r.eval(ctx, id, lim, 1)
	return d, err
}

// Client is what Redis needs from a go-redis client: scripts, and
// pipelines for the decisions that arrive together. A *redis.Client,
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient fits.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// DefaultKeyPrefix starts every Redis key the limiter writes.
const DefaultKeyPrefix = "keygate:"

// replyLen is how many values the script returns for each decision, and
// nArgs how many arguments it takes for each group of decisions (the
// last of them the group's count).
const (
	replyLen = 7
	nArgs    = 6
)

// errDecision means the script could not decide for this id: Redis
// refused a command on its keys.
var errDecision = errors.New("ratelimit: Redis could not decide: a command on this id's keys failed")

// errReply means Redis answered something the script never returns.
var errReply = errors.New("ratelimit: unexpected reply from rate limit script")

// fillKeys sets keys to id's bucket and quota keys, both in one
// allocation. They carry a Cluster hash tag so that one script touches
// one slot, and contain nothing but the prefix and the id.
func (r *Redis) fillKeys(keys *[2]string, id string) {
	both := r.bucketPrefix + id + "}" + r.quotaPrefix + id + "}"
	n := len(r.bucketPrefix) + len(id) + 1
	keys[0], keys[1] = both[:n], both[n:]
}

// eval runs the script once (EVALSHA, or EVAL when Redis lost the
// script), through the batcher, with the configured timeout as the
// decision's deadline. It asks for want
// cells (at least 1) and returns how many were granted: 0 with a refusal,
// else 1 to want, with the Decision's Remaining counted after all of
// them.
func (r *Redis) eval(ctx context.Context, id string, lim policy.Limit, want int64) (Decision, int64, error) {
	var qReq, qPer int64
	if lim.Quota.Enabled() {
		qReq, qPer = lim.Quota.Requests, max(1, lim.Quota.Per.Milliseconds())
	}
	interval := float64(lim.Per) / lim.Rate / float64(time.Microsecond)
	c := callPool.Get().(*call)
	c.deadline = time.Now().Add(r.timeout)
	r.fillKeys(&c.kbuf, id)
	c.keys = c.kbuf[:]
	c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5] = lim.Burst, interval, qReq, qPer, want, 1
	res, finished, err := r.batch.run(ctx, c)
	if finished {
		c.ctx, c.keys, c.kbuf, c.res, c.err = nil, nil, [2]string{}, nil, nil
		callPool.Put(c)
	}
	if err != nil {
		return Decision{}, 0, err
	}
	if len(res) != replyLen {
		return Decision{}, 0, fmt.Errorf("%w: %d values", errReply, len(res))
	}
	if res[0] == -1 {
		return Decision{}, 0, errDecision
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	switch res[1] {
	case 2: // the script did not look at the bucket
		return Decision{Reason: ReasonQuota, Limit: lim.Quota.Requests, RetryAfter: us(res[3]), Reset: us(res[4]),
			Quota: Window{Known: true, Reset: us(res[6])}}, 0, nil
	case 1:
		d := Decision{Reason: ReasonRate, Limit: int64(lim.Burst), RetryAfter: us(res[3]), Reset: us(res[4]),
			Bucket: Window{Known: true, Reset: us(res[4])}}
		if qReq > 0 {
			d.Quota = Window{Known: true, Remaining: max(res[5], 0), Reset: us(res[6])}
		}
		return d, 0, nil
	}
	if res[0] < 1 || res[0] > want {
		return Decision{}, 0, fmt.Errorf("%w: granted=%d of %d, reason=%d", errReply, res[0], want, res[1])
	}
	return combine(lim, min(max(res[2], 0), int64(lim.Burst)), us(res[4]), max(res[5], 0), us(res[6])), res[0], nil
}

// divide is lim shared among n replicas: what one replica may admit on its
// own while Redis is unavailable.
func divide(lim policy.Limit, n int) policy.Limit {
	if n <= 1 {
		return lim
	}
	lim.Rate /= float64(n)
	lim.Burst = max(1, lim.Burst/n)
	if lim.Quota.Enabled() {
		lim.Quota.Requests = max(1, lim.Quota.Requests/int64(n))
	}
	return lim
}
