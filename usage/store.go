package usage

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Retention is how long hourly buckets are kept: "last 7 days" can be
// answered, plus the hour in progress.
const Retention = 7*24*time.Hour + time.Hour

// Store keeps flushed counts in hourly buckets.
type Store interface {
	// Flush adds one drain's deltas; now picks the hourly bucket.
	Flush(ctx context.Context, ds []Delta, now time.Time) error
	// Read sums the buckets of ids over the last `since` (whole hours,
	// the current one included) and returns the latest last use of each.
	Read(ctx context.Context, ids []string, since time.Duration, now time.Time) (Counts, map[string]time.Time, error)
	// Series returns the same buckets hour by hour, summed over ids:
	// one entry per hour, oldest first, zero for hours without counts.
	Series(ctx context.Context, ids []string, since time.Duration, now time.Time) ([]Hour, error)
}

func hour(t time.Time) string { return t.UTC().Format("2006010215") }

// Hour is one hour's counts, summed over the keys asked for.
type Hour struct {
	// Start is the top of the hour, in UTC.
	Start time.Time `json:"start"`
	Counts
}

// newSeries returns zero counts for each hour covering since up to now
// (whole hours, the current one included), oldest first; since <= 0 or
// past 7 days means 7 days.
func newSeries(since time.Duration, now time.Time) []Hour {
	if since <= 0 || since > 7*24*time.Hour {
		since = 7 * 24 * time.Hour
	}
	n := int((since + time.Hour - 1) / time.Hour)
	out := make([]Hour, n)
	first := now.UTC().Truncate(time.Hour).Add(-time.Duration(n-1) * time.Hour)
	for i := range out {
		out[i].Start = first.Add(time.Duration(i) * time.Hour)
	}
	return out
}

func sum(hs []Hour) Counts {
	var c Counts
	for _, h := range hs {
		c.Add(h.Counts)
	}
	return c
}

// RedisStore writes per-key hourly hashes PREFIX usage:{ID}:YYYYMMDDHH
// (fields admitted, rate, quota, context, product, concurrency,
// forbidden_*, bytes_in; expiring Retention after they are created) and
// daily hashes by method PREFIX usage:{ID}:methods:YYYYMMDD (api_key,
// bearer; MethodRetention plus a day), and the sorted sets of last uses
// PREFIX usage:last:{lu:B} and usage:last_api_key:{lu:B} (lastsets.go; member
// the key id, score its last use in unix ms, raised with ZADD GT so that
// replicas flushing out of order never move it back).
//
// A replica writes a key's last use again only once it moved by
// LastUseStep since the replica last wrote it, so the sorted sets lag a
// key's true last use by at most LastUseStep (see lastUses).
type RedisStore struct {
	Client redis.UniversalClient
	Prefix string
	// LastUseStep is how far a last use may lag (0: every flush writes
	// every key's); LastUseKeys bounds the keys remembered for it.
	LastUseStep time.Duration
	LastUseKeys int

	lastOnce sync.Once
	last     *lastUses
	setsOnce sync.Once
	sets     [2][lastBuckets]string // lastSetsOf
}

func (s *RedisStore) bucket(id, h string) string { return s.Prefix + "usage:{" + id + "}:" + h }

// FlushBatch is how many keys' deltas one script call of a Redis flush
// carries: a few hundred short commands inside Redis, well under a
// millisecond of its time.
const FlushBatch = 100

// flushScript adds deltas to usage hashes, each hash's HINCRBYs followed
// by its EXPIRE in one script call. Redis runs a script whole or, when
// its call never arrived whole (a connection cut by a write timeout),
// not at all, so a flush cut at any point leaves no hash without its TTL;
// and a flush costs Redis and the gateway one command per batch of keys
// instead of about seven per key (the MULTI/EXEC it replaces queued and
// answered every command twice).
//
// KEYS: per key, its hour's hash and its day's hash by method.
// ARGV: the hour hash's TTL and the day hash's TTL, in seconds; then per
// key: n, n field and value pairs for the hour's hash, and the requests
// by API key and by bearer token for the day's hash (0 and 0: the day's
// hash is not touched).
var flushScript = redis.NewScript(`
local a = 3
for i = 1, #KEYS, 2 do
  local n = tonumber(ARGV[a])
  for j = a + 1, a + 2 * n, 2 do
    if redis.call('HINCRBY', KEYS[i], ARGV[j], ARGV[j + 1]) == tonumber(ARGV[j + 1]) then
      redis.call('EXPIRE', KEYS[i], ARGV[1])
    end
  end
  a = a + 2 * n + 1
  local api, bearer = ARGV[a], ARGV[a + 1]
  a = a + 2
  if api ~= '0' and redis.call('HINCRBY', KEYS[i + 1], 'api_key', api) == tonumber(api) then
    redis.call('EXPIRE', KEYS[i + 1], ARGV[2])
  end
  if bearer ~= '0' and redis.call('HINCRBY', KEYS[i + 1], 'bearer', bearer) == tonumber(bearer) then
    redis.call('EXPIRE', KEYS[i + 1], ARGV[2])
  end
end
return 0
`)

// Flush sends the deltas in one round trip (a pipeline) per FlushBatch
// keys, so that Redis answers each well within the client's read
// timeout however many keys a flush holds: on a single Redis (a
// *redis.Client, Sentinel's included) one flushScript call for the batch,
// on a Cluster or a Ring one per key (its two hashes share the key's hash
// slot; a script may not span slots), and the batch's last uses as one
// ZADD GT of many members per sorted set. A script Redis lost (a restart,
// a failover) is sent again whole, once.
func (s *RedisStore) Flush(ctx context.Context, ds []Delta, now time.Time) error {
	_, single := s.Client.(*redis.Client)
	s.lastOnce.Do(func() { s.last = newLastUses(s.LastUseStep, s.LastUseKeys) })
	h, d := hour(now), day(now)
	for len(ds) > 0 {
		b := ds[:min(len(ds), FlushBatch)]
		ds = ds[len(b):]
		due := s.last.due(b)
		if err := s.flushBatch(ctx, b, single, h, d, due); err != nil {
			return err
		}
		s.last.wrote(b, due, now)
	}
	return nil
}

// flushBatch sends one batch of deltas in one pipeline.
// due says whose last uses it writes (lastUses.due).
func (s *RedisStore) flushBatch(ctx context.Context, b []Delta, single bool, h, d string, due lastUseDue) error {
	type call struct {
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	per := len(b) // keys per script call
	if !single {
		per = 1
	}
	calls := make([]call, 0, len(b)/per)
	cmds, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < len(b); i += per {
			c := call{}
			c.keys, c.args = s.flushArgs(b[i:i+per], h, d)
			c.cmd = flushScript.EvalSha(ctx, p, c.keys, c.args...)
			calls = append(calls, c)
		}
		s.zaddLast(ctx, p, lastAny, b, due.any, func(d *Delta) time.Time { return d.LastUsed })
		s.zaddLast(ctx, p, lastAPIKey, b, due.apiKey, func(d *Delta) time.Time { return d.LastAPIKey })
		return nil
	})
	if err == nil {
		return nil
	}
	// Only the script calls Redis answered NOSCRIPT did nothing: send
	// those again with the source. Any other error fails the flush.
	for _, c := range cmds {
		if e := c.Err(); e != nil && !redis.HasErrorPrefix(e, "NOSCRIPT") {
			return e
		}
	}
	_, err = s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			if c.cmd.Err() != nil {
				flushScript.Eval(ctx, p, c.keys, c.args...)
			}
		}
		return nil
	})
	return err
}

// flushArgs are flushScript's keys and arguments for the keys of b.
func (s *RedisStore) flushArgs(b []Delta, h, d string) ([]string, []any) {
	keys := make([]string, 0, 2*len(b))
	args := make([]any, 0, 2+6*len(b))
	args = append(args, int64(Retention/time.Second), int64((MethodRetention+24*time.Hour)/time.Second))
	for i := range b {
		dl := &b[i]
		keys = append(keys, s.bucket(dl.ID, h), s.methodsKey(dl.ID, d))
		at := len(args)
		args = append(args, 0)
		n := 0
		for f := 0; f <= int(numOutcomes); f++ {
			if v := *dl.ptr(f); v != 0 {
				args = append(args, fieldName(f), v)
				n++
			}
		}
		args[at] = n
		args = append(args, dl.APIKey, dl.Bearer)
	}
	return keys, args
}

// zaddLast raises the last use of each delta that is due (a due one is
// set: lastUses.due) in the sorted sets of name (ZADD GT, so that
// replicas flushing out of order never move it back), in one command of
// many members per sorted set.
func (s *RedisStore) zaddLast(ctx context.Context, p redis.Pipeliner, name string, ds []Delta, due []bool, at func(*Delta) time.Time) {
	var zs [lastBuckets][]redis.Z
	for i := range ds {
		if due[i] {
			b := lastBucket(ds[i].ID)
			zs[b] = append(zs[b], redis.Z{Score: float64(at(&ds[i]).UnixMilli()), Member: ds[i].ID})
		}
	}
	sets := s.lastSetsOf(name)
	for b, z := range zs {
		if len(z) > 0 {
			p.ZAddGT(ctx, sets[b], z...)
		}
	}
}

func fieldName(f int) string {
	if f == int(numOutcomes) {
		return fieldBytesIn
	}
	return fields[f]
}

// Read sums the buckets of ids in one pipeline.
func (s *RedisStore) Read(ctx context.Context, ids []string, since time.Duration, now time.Time) (Counts, map[string]time.Time, error) {
	hs, last, err := s.read(ctx, ids, since, now, true)
	if err != nil {
		return Counts{}, nil, err
	}
	return sum(hs), last, nil
}

// Series reads the buckets of all ids and hours (see read).
func (s *RedisStore) Series(ctx context.Context, ids []string, since time.Duration, now time.Time) ([]Hour, error) {
	hs, _, err := s.read(ctx, ids, since, now, false)
	return hs, err
}

// read gets the buckets of ids over since, hour by hour, and with
// withLast their last uses (see hashesOf).
func (s *RedisStore) read(ctx context.Context, ids []string, since time.Duration, now time.Time, withLast bool) ([]Hour, map[string]time.Time, error) {
	hs := newSeries(since, now)
	last := map[string]time.Time{}
	lastName := ""
	if withLast {
		lastName = lastAny
	}
	err := s.hashesOf(ctx, ids, len(hs), func(id string, j int) string { return s.bucket(id, hour(hs[j].Start)) }, lastName,
		func(_ string, j int, m map[string]string) { hs[j].Add(parse(m)) },
		func(id string, at time.Time) { last[id] = at })
	if err != nil {
		return nil, nil, err
	}
	return hs, last, nil
}

// readBatch is the most commands one pipeline of hashesOf carries (each
// an HGETALL of an hour's or a day's bucket): a week of 20 keys is one
// round trip, and a consumer's usage over a week (169 hours a key) or the
// migration report (31 days a key) over thousands of keys is many, each
// well inside the client's timeouts. One pipeline for all of them
// outlasted the write timeout (930,000 commands at 100 ms) and held
// every reply at once.
const readBatch = 10_000

// hashesOf reads, for each of ids, the n hashes key(id, 0..n-1)
// (HGETALL each, passed to each) and, with last set, the id's last use of
// that name (lastsets.go; passed to score when set), in pipelines of at
// most readBatch commands and LastUsedPage ids.
func (s *RedisStore) hashesOf(ctx context.Context, ids []string, n int, key func(id string, j int) string, last string,
	each func(id string, j int, m map[string]string), score func(id string, at time.Time)) error {
	if n == 0 && last == "" {
		return nil
	}
	per := max(1, min(LastUsedPage, readBatch/max(n, 1)))
	for batch := range slices.Chunk(ids, per) {
		gets := make([]*redis.MapStringStringCmd, 0, len(batch)*n)
		var scores func() []float64
		_, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range batch {
				for j := range n {
					gets = append(gets, p.HGetAll(ctx, key(id, j)))
				}
			}
			if last != "" {
				scores = s.zmscore(ctx, p, last, batch)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, g := range gets {
			m, err := g.Result()
			if err != nil {
				return err
			}
			each(batch[i/n], i%n, m)
		}
		if scores != nil {
			for i, v := range scores() {
				if v > 0 {
					score(batch[i], time.UnixMilli(int64(v)).UTC())
				}
			}
		}
	}
	return nil
}

// LastUsedPage is how many ids one ZMSCORE of RedisStore.LastUsed asks
// for: a reply well inside the client's read timeout, and about 0.3 ms of
// redis-server's time in a set of a million members (measured: 100 ids
// 0.14–0.19 ms, 1000 ids 1.2–1.7 ms).
const LastUsedPage = 200

// lastUsedPipeline is how many ZMSCOREs of LastUsedPage ids one round
// trip of RedisStore.LastUsed carries: a few milliseconds of replies, well
// inside the read timeout, and a million keys' last uses in 313 round
// trips.
const lastUsedPipeline = 16

// LastUsed returns the last use of each of ids that has one: for each
// LastUsedPage ids, one ZMSCORE per sorted set they fall in (up to
// lastBuckets; lastUsedPipeline pages per round trip), never a
// read of the whole sorted set (a fleet's million keys would be one reply
// of tens of megabytes, and redis-server would answer nothing else while
// it built it).
func (s *RedisStore) LastUsed(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(ids))
	for batch := range slices.Chunk(ids, LastUsedPage*lastUsedPipeline) {
		var pages [][]string
		var scores []func() []float64
		_, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for page := range slices.Chunk(batch, LastUsedPage) {
				pages, scores = append(pages, page), append(scores, s.zmscore(ctx, p, lastAny, page))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for i, sc := range scores {
			for j, v := range sc() {
				if v > 0 {
					out[pages[i][j]] = time.UnixMilli(int64(v)).UTC()
				}
			}
		}
	}
	return out, nil
}

func parse(m map[string]string) Counts {
	var c Counts
	for f := 0; f <= int(numOutcomes); f++ {
		if v, err := strconv.ParseInt(m[fieldName(f)], 10, 64); err == nil {
			*c.ptr(f) = v
		}
	}
	return c
}

// Forget drops the last uses of ids (keys that were purged): ZREM of
// LastUsedPage ids at a time (one per sorted set they fall in),
// lastUsedPipeline to a round trip, from the sorted sets of both names,
// which otherwise keep a member for every key id ever used.
// Their hourly and daily counts expire on their own.
func (s *RedisStore) Forget(ctx context.Context, ids []string) error {
	for batch := range slices.Chunk(ids, LastUsedPage*lastUsedPipeline) {
		_, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for page := range slices.Chunk(batch, LastUsedPage) {
				for _, name := range []string{lastAny, lastAPIKey} {
					for k, at := range s.byLastSet(name, page) {
						members := make([]any, len(at))
						for j, i := range at {
							members[j] = page[i]
						}
						p.ZRem(ctx, k, members...)
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
