package usage_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/usage"
)

// lastSet is the sorted set of last uses of name ("last" or
// "last_api_key") that holds id's (the layout of lastsets.go, written out
// again here).
func lastSet(prefix, name, id string) string {
	return fmt.Sprintf("%susage:%s:{lu:%x}", prefix, name, crc32.ChecksumIEEE([]byte(id))%16)
}

// lastSetsOf is how many sorted sets of one name the ids fall in.
func lastSetsOf(ids []string) int {
	sets := map[string]bool{}
	for _, id := range ids {
		sets[lastSet("", "last", id)] = true
	}
	return len(sets)
}

// zcard is how many last uses of name the store at prefix holds, over
// its sorted sets.
func zcard(t *testing.T, c redis.UniversalClient, prefix, name string) int64 {
	t.Helper()
	var n int64
	for b := range 16 {
		k := fmt.Sprintf("%susage:%s:{lu:%x}", prefix, name, b)
		m, err := c.ZCard(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	return n
}

func byID(ds []usage.Delta) map[string]usage.Delta {
	m := map[string]usage.Delta{}
	for _, d := range ds {
		m[d.ID] = d
	}
	return m
}

// TestCountersConcurrent: many goroutines record into the same and
// different keys while drains run; every request is counted exactly once.
func TestCountersConcurrent(t *testing.T) {
	c := usage.NewCounters(0)
	now := time.Unix(1_800_000_000, 0)
	const workers, per = 8, 2000
	var total usage.Counts
	var mu sync.Mutex
	drain := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range c.Drain() {
			total.Add(d.Counts)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				drain()
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				id := fmt.Sprintf("key_%d", i%10)
				if i%2 == 0 {
					id = fmt.Sprintf("own_%d", w)
				}
				c.Record(id, usage.ByAPIKey, usage.Outcome(i%3), 10, now.Add(time.Duration(i)*time.Millisecond))
			}
		}()
	}
	wg.Wait()
	close(stop)
	drain()
	got := total.Admitted + total.Rate + total.Quota
	if got != workers*per || total.BytesIn != 10*workers*per {
		t.Fatalf("counted %d requests, %d bytes; want %d, %d", got, total.BytesIn, workers*per, 10*workers*per)
	}
}

func TestCountersLastUsedIsTheMax(t *testing.T) {
	c := usage.NewCounters(0)
	t0 := time.Unix(1_800_000_000, 0).UTC()
	c.Record("k", usage.ByAPIKey, usage.Admitted, 0, t0.Add(time.Second))
	c.Record("k", usage.ByAPIKey, usage.RefusedRate, 0, t0) // an older request finishing later
	c.Record("", usage.ByAPIKey, usage.Admitted, 0, t0)     // no key id: not counted
	ds := byID(c.Drain())
	if len(ds) != 1 || !ds["k"].LastUsed.Equal(t0.Add(time.Second)) || ds["k"].Admitted != 1 || ds["k"].Rate != 1 {
		t.Fatalf("drain = %+v", ds)
	}
	if ds := c.Drain(); len(ds) != 0 {
		t.Fatalf("second drain = %+v, want nothing", ds)
	}
}

// TestCountersBoundedMemory: past the cap, new keys are not tracked but
// counted as dropped; tracked keys keep counting; a drain frees the room.
func TestCountersBoundedMemory(t *testing.T) {
	c := usage.NewCounters(64) // 2 per shard
	now := time.Now()
	for i := range 10000 {
		c.Record(fmt.Sprintf("key_%d", i), usage.ByAPIKey, usage.Admitted, 0, now)
	}
	ds := c.Drain()
	if len(ds) > 64 || len(ds) == 0 {
		t.Fatalf("tracked %d keys, want 1..64", len(ds))
	}
	if got := c.Dropped(); got != 10000-int64(len(ds)) {
		t.Fatalf("dropped %d, want %d", got, 10000-len(ds))
	}
	c.Record("key_1", usage.ByAPIKey, usage.Admitted, 0, now)
	if ds := c.Drain(); len(ds) != 1 {
		t.Fatalf("after a drain: %d keys, want 1", len(ds))
	}
}

func TestRecordAllocatesNothingForATrackedKey(t *testing.T) {
	c := usage.NewCounters(0)
	now := time.Now()
	c.Record("key_a", usage.ByAPIKey, usage.Admitted, 1, now)
	if n := testing.AllocsPerRun(1000, func() { c.Record("key_a", usage.ByAPIKey, usage.Admitted, 1, now) }); n != 0 {
		t.Fatalf("Record allocates %v times per call", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	c := usage.NewCounters(0)
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Record("key_abcdef", usage.ByAPIKey, usage.Admitted, 100, now)
		}
	})
}

func storeRoundTrip(t *testing.T, s interface {
	usage.Store
	LastUsed(context.Context, []string) (map[string]time.Time, error)
}) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC)
	t1 := now.Add(-time.Minute)
	c := usage.NewCounters(0)
	c.Record("key_a", usage.ByAPIKey, usage.Admitted, 100, t1)
	c.Record("key_a", usage.ByAPIKey, usage.RefusedQuota, 0, t1)
	c.Record("key_b", usage.ByAPIKey, usage.RefusedContext, 50, now)
	if err := s.Flush(ctx, c.Drain(), now); err != nil {
		t.Fatal(err)
	}
	// A second replica flushes an older last use into the next hour.
	c.Record("key_a", usage.ByAPIKey, usage.Admitted, 1, t1.Add(-time.Hour))
	if err := s.Flush(ctx, c.Drain(), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// An hour 3 days ago.
	c.Record("key_a", usage.ByAPIKey, usage.RefusedRate, 0, now.Add(-72*time.Hour))
	if err := s.Flush(ctx, c.Drain(), now.Add(-72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, last, err := s.Read(ctx, []string{"key_a"}, 24*time.Hour, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := (usage.Counts{Admitted: 2, Quota: 1, BytesIn: 101}); got != want {
		t.Errorf("24h = %+v, want %+v", got, want)
	}
	if !last["key_a"].Equal(t1.Truncate(time.Millisecond)) {
		t.Errorf("last used = %v, want %v (the max, not the latest flushed)", last["key_a"], t1)
	}
	got, _, _ = s.Read(ctx, []string{"key_a", "key_b"}, 7*24*time.Hour, now.Add(time.Hour))
	if want := (usage.Counts{Admitted: 2, Quota: 1, Rate: 1, Context: 1, BytesIn: 151}); got != want {
		t.Errorf("7d both = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		ids  []string
		want map[string]time.Time
	}{
		{[]string{"key_a", "key_b"}, map[string]time.Time{"key_a": t1.Truncate(time.Millisecond), "key_b": now}},
		{[]string{"key_b"}, map[string]time.Time{"key_b": now}},
		{[]string{"key_never_used", "key_a"}, map[string]time.Time{"key_a": t1.Truncate(time.Millisecond)}},
		{nil, map[string]time.Time{}},
	} {
		got, err := s.LastUsed(ctx, tc.ids)
		if err != nil || !maps.EqualFunc(got, tc.want, time.Time.Equal) {
			t.Errorf("LastUsed(%q) = %v, %v; want %v", tc.ids, got, err, tc.want)
		}
	}
}

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	storeRoundTrip(t, s)
	ttl, err := client.TTL(context.Background(), "kg:usage:{key_a}:2026112310").Result()
	if err != nil || ttl <= 7*24*time.Hour || ttl > usage.Retention {
		t.Errorf("bucket TTL = %v, %v; want just over 7 days", ttl, err)
	}
}

// TestRedisLastUsedReadsOnlyTheKeysAsked: the keys page of the portal and
// `keys list` ask for the last uses of the keys they show. Redis is asked
// for those ids alone, usage.LastUsedPage at a time (one ZMSCORE each),
// never for the whole sorted set: with a fleet's million keys, that one
// reply would hold redis-server, and every replica's limiter behind it,
// for longer than their read timeout.
func TestRedisLastUsedReadsOnlyTheKeysAsked(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	const used = 3000 // keys with a last use; the ids asked include unused ones
	c := usage.NewCounters(0)
	for i := range used {
		c.Record(fmt.Sprintf("key_%d", i), usage.ByAPIKey, usage.Admitted, 1, now.Add(time.Duration(i)*time.Millisecond))
	}
	if err := s.Flush(ctx, c.Drain(), now); err != nil {
		t.Fatal(err)
	}
	ids := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("key_%d", i))
		}
		return out
	}
	// A store looks once for the sorted sets of the layout before the
	// buckets; there are none here.
	if _, err := s.LastUsed(ctx, []string{"key_0"}); err != nil {
		t.Fatal(err)
	}
	h := &countHook{}
	client.AddHook(h)
	// pages is how many ZMSCOREs ids cost: one per page and sorted set.
	pages := func(ids []string) int {
		n := 0
		for i := 0; i < len(ids); i += usage.LastUsedPage {
			n += lastSetsOf(ids[i:min(i+usage.LastUsedPage, len(ids))])
		}
		return n
	}
	few := []string{"key_7", "key_2999", "key_unused"}
	for _, tc := range []struct {
		name       string
		ids        []string
		found      int
		zmscores   int
		roundTrips int // 16 pages per round trip at most
	}{
		{"a consumer's few keys", few, 2, lastSetsOf(few), 1},
		{"one page exactly", ids(0, usage.LastUsedPage), usage.LastUsedPage, pages(ids(0, usage.LastUsedPage)), 1},
		{"more than two pages, some never used", ids(used-2*usage.LastUsedPage, used+usage.LastUsedPage/2), 2 * usage.LastUsedPage,
			pages(ids(used-2*usage.LastUsedPage, used+usage.LastUsedPage/2)), 1},
		{"more than one round trip of pages", ids(0, used+usage.LastUsedPage*5/2), used, pages(ids(0, used+usage.LastUsedPage*5/2)), 2},
		{"none", nil, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.Calls(t)
			h.pipelines, h.single = 0, 0
			got, err := s.LastUsed(ctx, tc.ids)
			if err != nil {
				t.Fatal(err)
			}
			if n := h.pipelines + h.single; n != tc.roundTrips {
				t.Errorf("%d round trips, want %d", n, tc.roundTrips)
			}
			after := srv.Calls(t)
			if len(got) != tc.found {
				t.Errorf("found %d last uses, want %d", len(got), tc.found)
			}
			for id, at := range got {
				var i int
				if _, err := fmt.Sscanf(id, "key_%d", &i); err != nil || !at.Equal(now.Add(time.Duration(i)*time.Millisecond)) {
					t.Errorf("last use of %s = %v, want %v", id, at, now.Add(time.Duration(i)*time.Millisecond))
				}
			}
			if n := after["zmscore"] - before["zmscore"]; n != tc.zmscores {
				t.Errorf("%d ZMSCOREs, want %d", n, tc.zmscores)
			}
			for _, cmd := range []string{"zrange", "zrangebyscore", "zscan", "zrevrange"} {
				if after[cmd] != before[cmd] {
					t.Errorf("LastUsed sent %s: it read the whole set", cmd)
				}
			}
		})
	}
}

// TestRedisFlushIsOnePipeline: a flush of many keys is one round trip
// (a pipeline go-redis sends in one write) per usage.FlushBatch keys, of
// one script call and one ZADD per sorted set; a hook counts any per-key
// call outside them. A Redis that lost the script (restarted, or SCRIPT
// FLUSH) costs one more round trip (its first batch's script call sent
// again with the source, which Redis then keeps) and counts nothing twice.
func TestRedisFlushIsOnePipeline(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil { // the connection's handshake is not the flush
		t.Fatal(err)
	}
	h := &countHook{}
	client.AddHook(h)
	zh := &zaddHook{}
	client.AddHook(zh)
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	const n = 500
	now := time.Now()
	flush := func() {
		t.Helper()
		c := usage.NewCounters(0)
		for i := range n {
			c.Record(fmt.Sprintf("key_%d", i), usage.ByAPIKey, usage.Admitted, 1, now)
		}
		if err := s.Flush(ctx, c.Drain(), now); err != nil {
			t.Fatal(err)
		}
	}
	calls := func() map[string]int { return srv.Calls(t) }
	batches := (n + usage.FlushBatch - 1) / usage.FlushBatch
	for _, tc := range []struct {
		name      string
		before    func()
		pipelines int
		evals     int
	}{
		{"script unknown to Redis", func() {}, batches + 1, 1},
		{"script known", func() {}, batches, 0},
		{"after SCRIPT FLUSH", func() {
			if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}, batches + 1, 1},
	} {
		tc.before()
		h.pipelines, h.single = 0, 0
		zh.batches = nil
		c0 := calls()
		flush()
		c1 := calls()
		if h.pipelines != tc.pipelines || h.single != 0 {
			t.Errorf("%s: flush made %d pipelines and %d single calls, want %d and 0", tc.name, h.pipelines, h.single, tc.pipelines)
		}
		// One ZADD per batch, sorted set and name, writing each of the
		// batch's keys once a name. A batch is any 100 of the keys (a
		// drain's order is a map's), so what it should send is worked out
		// from the keys it flushed.
		zadds, keys := 0, 0
		for _, b := range zh.batches {
			if want := 2 * lastSetsOf(b.ids); b.zadds != want || b.members != 2*len(b.ids) {
				t.Errorf("%s: a batch of %d keys sent %d ZADDs of %d members, want %d of %d", tc.name, len(b.ids), b.zadds, b.members, want, 2*len(b.ids))
			}
			zadds, keys = zadds+b.zadds, keys+len(b.ids)
		}
		if keys != n {
			t.Errorf("%s: the batches flushed %d keys, want %d", tc.name, keys, n)
		}
		for cmd, want := range map[string]int{"evalsha": batches, "eval": tc.evals, "zadd": zadds, "multi": 0, "exec": 0} {
			if got := c1[cmd] - c0[cmd]; got != want {
				t.Errorf("%s: %d %s calls, want %d", tc.name, got, cmd, want)
			}
		}
	}
	got, _, err := s.Read(ctx, []string{"key_0", "key_499"}, time.Hour, now)
	if err != nil || got.Admitted != 2*3 {
		t.Errorf("read back %+v, %v; want 6 admitted (two keys, three flushes)", got, err)
	}
	m, err := s.Methods(ctx, []string{"key_7"}, 24*time.Hour, now)
	if err != nil || m["key_7"].APIKey != 3 {
		t.Errorf("methods %+v, %v; want 3 by API key", m, err)
	}
}

// TestRedisFlushOfManyKeysFitsTheReadTimeout: a flush of the keys a busy
// gateway saw in one interval (30,000: a warm-up over many keys), and the
// reads of their usage, go to Redis in round trips of bounded size, every
// key counted and its last use set: no single round trip waits for Redis
// to run the whole flush or read, so each fits keygate's default 100 ms
// timeouts.
//
// The bound is asserted on the round trips' sizes (a hook counts them),
// not on time: on a loaded machine a round trip of any size can outlast
// 100 ms. The client's timeouts are generous for that reason, and the
// slowest round trip is logged.
func TestRedisFlushOfManyKeysFitsTheReadTimeout(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t, func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = 10*time.Second, 10*time.Second })
	trips := &tripHook{}
	client.AddHook(trips)
	defer func() {
		trips.mu.Lock()
		defer trips.mu.Unlock()
		t.Logf("%d round trips; the largest carried %d commands, the largest flush script call %d keys' deltas; the slowest took %v",
			trips.n, trips.maxCmds, trips.maxFlushKeys, trips.slowest.Round(time.Millisecond))
		// readBatch in store.go: a round trip's most commands.
		if trips.maxCmds > 10_000 {
			t.Errorf("a round trip carried %d commands, want at most 10,000", trips.maxCmds)
		}
		if trips.maxFlushKeys > usage.FlushBatch {
			t.Errorf("a flush script call carried %d keys' deltas, want at most %d", trips.maxFlushKeys, usage.FlushBatch)
		}
	}()
	ctx := context.Background()
	s := &usage.RedisStore{Client: client, Prefix: "kg:"}
	now := time.Now()
	const n = 30_000
	c := usage.NewCounters(0)
	for i := range n {
		c.Record(fmt.Sprintf("key_%05d", i), usage.ByAPIKey, usage.Admitted, 256, now)
	}
	if err := s.Flush(ctx, c.Drain(), now); err != nil {
		t.Fatalf("flush of %d keys: %v", n, err)
	}
	for _, name := range []string{"last", "last_api_key"} {
		if got := zcard(t, client, "kg:", name); got != n {
			t.Errorf("the sorted sets of %s hold %d members; want %d", name, got, n)
		}
	}
	ids := []string{"key_00000", "key_14999", "key_29999"}
	got, last, err := s.Read(ctx, ids, time.Hour, now)
	if err != nil || got.Admitted != 3 || got.BytesIn != 3*256 || len(last) != 3 {
		t.Errorf("read back %+v, %d last uses, %v", got, len(last), err)
	}
	all := make([]string, n)
	for i := range all {
		all[i] = fmt.Sprintf("key_%05d", i)
	}
	// A week of usage of a big consumer's 5000 keys (169 hourly buckets a
	// key: 845,000 commands, and their last uses; a consumer's usage page)
	// goes through the same client in pipelines of bounded size.
	some := all[:5000]
	if got, last, err := s.Read(ctx, some, 7*24*time.Hour, now); err != nil || got.Admitted != int64(len(some)) || len(last) != len(some) {
		t.Errorf("a week of %d keys: %+v, %d last uses, %v; want %d of each", len(some), got, len(last), err, len(some))
	}
	// So does the migration report's read of every key by method over
	// 30 days (31 day hashes a key: 930,000 commands).
	m, err := s.Methods(ctx, all, usage.MaxMethodWindow, now)
	if err != nil || len(m) != n {
		t.Fatalf("methods of %d keys: %d, %v", n, len(m), err)
	}
	for _, id := range ids {
		if c := m[id]; c.APIKey != 1 || c.Bearer != 0 || c.LastAPIKey.IsZero() {
			t.Errorf("methods of %s: %+v, want one request by API key and its time", id, c)
		}
	}
}

// zaddHook records, for each pipeline with a flush script call, the keys
// the call flushes and the ZADDs sent beside it (their count and members).
type zaddHook struct {
	batches []zaddBatch
}

type zaddBatch struct {
	ids            []string
	zadds, members int
}

func (h *zaddHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *zaddHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *zaddHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var b zaddBatch
		seen := map[string]bool{}
		for _, c := range cmds {
			args := c.Args()
			switch c.Name() {
			case "evalsha", "eval":
				nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
				for _, k := range args[3 : 3+nkeys] {
					// kg:usage:{ID}:HOUR and kg:usage:{ID}:methods:DAY
					ks := fmt.Sprint(k)
					id := ks[strings.IndexByte(ks, '{')+1 : strings.IndexByte(ks, '}')]
					if !seen[id] {
						seen[id] = true
						b.ids = append(b.ids, id)
					}
				}
			case "zadd":
				b.zadds++
				b.members += (len(args) - 3) / 2 // zadd key gt score member ...
			}
		}
		if len(b.ids) > 0 && !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "eval" }) {
			// (a NOSCRIPT retry's pipeline, of EVALs alone, is not a batch)
			h.batches = append(h.batches, b)
		}
		return next(ctx, cmds)
	}
}

// tripHook records, for the round trips (a command or a pipeline) made
// through a client, their number, the most commands one carried, the
// most keys' deltas one usage flush script call carried (two KEYS a
// key), and the slowest. The test that adds it reads it once its calls
// have returned. It is safe for concurrent use.
type tripHook struct {
	mu                       sync.Mutex
	n, maxCmds, maxFlushKeys int
	slowest                  time.Duration
}

func (h *tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.trip(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.trip(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *tripHook) trip(_ context.Context, cmds []redis.Cmder, send func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	h.maxCmds = max(h.maxCmds, len(cmds))
	for _, c := range cmds {
		if name := c.Name(); name != "evalsha" && name != "eval" {
			continue
		}
		if args := c.Args(); len(args) > 2 {
			if n, ok := args[2].(int); ok {
				h.maxFlushKeys = max(h.maxFlushKeys, n/2)
			}
		}
	}
	h.mu.Unlock()
	start := time.Now()
	err := send()
	took := time.Since(start)
	h.mu.Lock()
	h.slowest = max(h.slowest, took)
	return err
}

type countHook struct{ pipelines, single int }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" { // a new connection's handshake
			h.single++
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "client" { // a new connection's CLIENT SETINFO
			h.pipelines++
		}
		return next(ctx, cmds)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestFileStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
	storeRoundTrip(t, &usage.FileStore{Path: path})
	// A new process (the CLI) reads what was flushed.
	got, _, err := (&usage.FileStore{Path: path}).Read(context.Background(), []string{"key_b"}, time.Hour, time.Date(2026, 11, 23, 10, 59, 0, 0, time.UTC))
	if err != nil || got.Context != 1 {
		t.Fatalf("re-read = %+v, %v", got, err)
	}
}

func TestFlusherFlushesOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "u.json")
	c := usage.NewCounters(0)
	flushes := 0
	f, err := usage.NewFlusher(context.Background(), usage.FlusherConfig{Counters: c, Store: &usage.FileStore{Path: path}, Interval: time.Hour, OnFlush: func(err error) {
		if err != nil {
			t.Error(err)
		}
		flushes++
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.Record("k", usage.ByAPIKey, usage.Admitted, 0, time.Now())
	_ = f.Close()
	if flushes != 1 {
		t.Fatalf("flushes = %d, want 1 (on Close)", flushes)
	}
	c.Record("k", usage.ByAPIKey, usage.Admitted, 0, time.Now())
	if err := f.Close(); err != nil || flushes != 1 {
		t.Fatalf("a second Close: %v, flushes = %d; want nothing more", err, flushes)
	}
	got, _, _ := (&usage.FileStore{Path: path}).Read(context.Background(), []string{"k"}, time.Hour, time.Now())
	if got.Admitted != 1 {
		t.Fatalf("read %+v", got)
	}
}

// TestNewFlusherNeedsCountersAndAStore: a Flusher without either is an
// error, not a loop that panics at its first tick.
func TestNewFlusherNeedsCountersAndAStore(t *testing.T) {
	t.Parallel()
	store := &usage.FileStore{Path: filepath.Join(t.TempDir(), "u.json")}
	for _, tc := range []struct {
		name string
		cfg  usage.FlusherConfig
	}{
		{"no counters", usage.FlusherConfig{Store: store}},
		{"no store", usage.FlusherConfig{Counters: usage.NewCounters(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if f, err := usage.NewFlusher(context.Background(), tc.cfg); err == nil {
				_ = f.Close()
				t.Fatal("NewFlusher succeeded")
			}
		})
	}
}

// TestFileStoreRefusesABadPeriod: a usage file whose bucket names are not
// hours (10 digits) or days (8 digits) is an error, not counts put in
// the wrong hour or dropped without a word.
func TestFileStoreRefusesABadPeriod(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		ok         bool
	}{
		{"good", `{"buckets":{"k":{"2026112410":{"admitted":1}}},"methods":{"k":{"20261124":{"api_key":1,"bearer":0}}}}`, true},
		{"dashes", `{"buckets":{"k":{"2026-11-24":{"admitted":1}}}}`, false},
		{"an hour too long", `{"buckets":{"k":{"20261124101":{"admitted":1}}}}`, false},
		{"a sign", `{"buckets":{"k":{"+026112410":{"admitted":1}}}}`, false},
		{"a day too short", `{"methods":{"k":{"2026112":{"api_key":1,"bearer":0}}}}`, false},
		{"an hour as a day", `{"methods":{"k":{"2026112410":{"api_key":1,"bearer":0}}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			s := &usage.FileStore{Path: path}
			got, _, err := s.Read(context.Background(), []string{"k"}, 0, time.Date(2026, 11, 24, 10, 30, 0, 0, time.UTC))
			if tc.ok && (err != nil || got.Admitted != 1) {
				t.Errorf("Read = %+v, %v; want 1 admitted", got, err)
			}
			if !tc.ok && err == nil {
				t.Errorf("Read = %+v, want an error", got)
			}
			if err := s.Flush(context.Background(), []usage.Delta{{ID: "k", Counts: usage.Counts{Admitted: 1}}}, time.Now()); (err == nil) != tc.ok {
				t.Errorf("Flush = %v", err)
			}
		})
	}
}

// TestFileStoreDropsOldHoursKeepsLastUse: hours past Retention and days
// past MethodRetention leave the store and the file once an hour's flush
// prunes them; a key's last use stays.
func TestFileStoreDropsOldHoursKeepsLastUse(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
	s := &usage.FileStore{Path: path}
	t0 := time.Date(2026, 10, 1, 10, 30, 0, 0, time.UTC)
	if err := s.Flush(ctx, []usage.Delta{{ID: "key_old", Counts: usage.Counts{Admitted: 5}, LastUsed: t0, APIKey: 5, LastAPIKey: t0}}, t0); err != nil {
		t.Fatal(err)
	}
	for _, later := range []time.Duration{8 * 24 * time.Hour, 32 * 24 * time.Hour} {
		now := t0.Add(later)
		if err := s.Flush(ctx, []usage.Delta{{ID: "key_new", Counts: usage.Counts{Admitted: 1}, LastUsed: now}}, now); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		for name, st := range map[string]*usage.FileStore{"the store": s, "the file": {Path: path}} {
			got, last, err := st.Read(ctx, []string{"key_old"}, 0, now)
			if err != nil || got != (usage.Counts{}) || !last["key_old"].Equal(t0) {
				t.Errorf("%s, %v later: %+v, last use %v, %v; want no counts and the last use", name, later, got, last, err)
			}
			m, err := st.Methods(ctx, []string{"key_old"}, usage.MaxMethodWindow, now)
			wantAPI := int64(5) // within MethodRetention at 8 days
			if later > usage.MethodRetention {
				wantAPI = 0
			}
			if err != nil || m["key_old"].APIKey != wantAPI || !m["key_old"].LastAPIKey.Equal(t0) {
				t.Errorf("%s, %v later: methods %+v, %v; want %d by API key and the last use", name, later, m["key_old"], err, wantAPI)
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "20261001") {
		t.Errorf("the file still holds 2026-10-01's buckets: %s", b)
	}
}
