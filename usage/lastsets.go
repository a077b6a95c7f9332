package usage

import (
	"context"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The last uses live in two sorted sets, by what a key was last used with:
// any credential (lastAny) and the API key itself (lastAPIKey). Each is
// spread over lastBuckets sorted sets, each its own Cluster hash tag,
//
//	PREFIX usage:last:{lu:<b>}  and  PREFIX usage:last_api_key:{lu:<b>}
//	    (b: CRC-32 of the key id modulo lastBuckets, in hex)
//
// so that a fleet's million keys (120 B a key in each) do not sit on one
// Cluster slot. A page of ids then costs up to lastBuckets ZMSCOREs
// instead of one.
//
// Before, each was one sorted set (PREFIX usage:last, PREFIX
// usage:last_api_key). A replica of that build, during a rolling upgrade,
// still writes there; so while either exists, reads look there too and
// take the later of the two last uses (ZADD GT never moves one back, so
// the later is the true one), and purges remove from it too.
// MoveLastUses (`keygate keys migrate`) moves its members into the
// buckets and deletes it.
const (
	lastAny     = "last"
	lastAPIKey  = "last_api_key"
	lastBuckets = 16
)

// lastSet is the sorted set of name that holds id's last use.
func (s *RedisStore) lastSet(name, id string) string {
	return s.lastSetsOf(name)[lastBucket(id)]
}

// lastBucket is the bucket of id's last uses.
func lastBucket(id string) uint32 { return crc32.ChecksumIEEE([]byte(id)) % lastBuckets }

// lastSetsOf is the sorted sets of name, by bucket (made once).
func (s *RedisStore) lastSetsOf(name string) *[lastBuckets]string {
	s.setsOnce.Do(func() {
		for i, n := range []string{lastAny, lastAPIKey} {
			for b := range lastBuckets {
				s.sets[i][b] = fmt.Sprintf("%susage:%s:{lu:%x}", s.Prefix, n, b)
			}
		}
	})
	if name == lastAny {
		return &s.sets[0]
	}
	return &s.sets[1]
}

// legacyLastSet is the one sorted set of name of the previous layout.
func (s *RedisStore) legacyLastSet(name string) string { return s.Prefix + "usage:" + name }

// byLastSet groups the positions of ids by the sorted set of name that
// holds each.
func (s *RedisStore) byLastSet(name string, ids []string) map[string][]int {
	out := make(map[string][]int, min(len(ids), lastBuckets))
	for i, id := range ids {
		k := s.lastSet(name, id)
		out[k] = append(out[k], i)
	}
	return out
}

// zmscore queues, on p, the reads of the last uses of name of ids, and
// returns what gives them once p has run: each id's score (0 for none),
// the later of the buckets' and, while it may exist, the previous
// layout's.
func (s *RedisStore) zmscore(ctx context.Context, p redis.Pipeliner, name string, ids []string, legacy bool) func() []float64 {
	groups := s.byLastSet(name, ids)
	cmds := make(map[string]*redis.FloatSliceCmd, len(groups))
	for k, at := range groups {
		members := make([]string, len(at))
		for j, i := range at {
			members[j] = ids[i]
		}
		cmds[k] = p.ZMScore(ctx, k, members...)
	}
	var old *redis.FloatSliceCmd
	if legacy {
		old = p.ZMScore(ctx, s.legacyLastSet(name), ids...)
	}
	return func() []float64 {
		out := make([]float64, len(ids))
		for k, at := range groups {
			for j, v := range cmds[k].Val() {
				out[at[j]] = v
			}
		}
		if old != nil {
			for i, v := range old.Val() {
				out[i] = max(out[i], v)
			}
		}
		return out
	}
}

// legacyLastLeft reports whether the previous layout's sorted sets may
// still exist: until both are found gone (one round trip, until then;
// nothing of this build writes them again).
func (s *RedisStore) legacyLastLeft(ctx context.Context) bool {
	if s.legacyGone.Load() {
		return false
	}
	n, err := s.Client.Exists(ctx, s.legacyLastSet(lastAny), s.legacyLastSet(lastAPIKey)).Result()
	if err != nil || n > 0 {
		return true
	}
	s.legacyGone.Store(true)
	return false
}

// MoveLastUses moves the members of the previous layout's sorted sets
// into their buckets (ZADD GT, so that a later last use a replica wrote
// there meanwhile is kept), a page at a time (ZSCAN, then ZREM of the
// page), and reports how many it moved. Running it again moves nothing.
func (s *RedisStore) MoveLastUses(ctx context.Context) (int, error) {
	moved := 0
	for _, name := range []string{lastAny, lastAPIKey} {
		old := s.legacyLastSet(name)
		var cursor uint64
		for {
			kv, next, err := s.Client.ZScan(ctx, old, cursor, "", moveLastPage).Result()
			if err != nil {
				return moved, err
			}
			if len(kv) > 0 {
				zs := make(map[string][]redis.Z)
				members := make([]any, 0, len(kv)/2)
				for i := 0; i+1 < len(kv); i += 2 {
					score, err := strconv.ParseFloat(kv[i+1], 64)
					if err != nil {
						return moved, fmt.Errorf("usage: %s: member %q: score %q: %w", old, kv[i], kv[i+1], err)
					}
					k := s.lastSet(name, kv[i])
					zs[k] = append(zs[k], redis.Z{Score: score, Member: kv[i]})
					members = append(members, kv[i])
				}
				_, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
					for k, z := range zs {
						p.ZAddGT(ctx, k, z...)
					}
					return nil
				})
				if err == nil {
					err = s.Client.ZRem(ctx, old, members...).Err()
				}
				if err != nil {
					return moved, err
				}
				moved += len(members)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	s.legacyGone.Store(true)
	return moved, nil
}

// moveLastPage is the COUNT of MoveLastUses' ZSCANs.
const moveLastPage = 1000
