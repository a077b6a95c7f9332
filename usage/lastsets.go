package usage

import (
	"context"
	"fmt"
	"hash/crc32"

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
// returns what gives them once p has run: each id's score (0 for none).
func (s *RedisStore) zmscore(ctx context.Context, p redis.Pipeliner, name string, ids []string) func() []float64 {
	groups := s.byLastSet(name, ids)
	cmds := make(map[string]*redis.FloatSliceCmd, len(groups))
	for k, at := range groups {
		members := make([]string, len(at))
		for j, i := range at {
			members[j] = ids[i]
		}
		cmds[k] = p.ZMScore(ctx, k, members...)
	}
	return func() []float64 {
		out := make([]float64, len(ids))
		for k, at := range groups {
			for j, v := range cmds[k].Val() {
				out[at[j]] = v
			}
		}
		return out
	}
}
