package main

// -keys N: keygate with N keys in its keystore and the load spread evenly
// over all of them (targets keygate-keys and keygate-redis-keys), measured
// in the same run beside keygate and keygate-redis with one key; and
// nginx-lua-keys, nginx-lua with the N keys' hashes in its Lua table,
// beside nginx-lua with one.
//
// The N keys are minted here with the keystore package's own functions
// (keystore.NewRecord: keygate's key format and checksum, its SHA-256
// hash) and written as a keystore file with keystore.MarshalFile; their
// plaintext goes to a file of the bench's temp dir that the wrk script
// reads. The one key that `keygate keys issue` made is one of the N, so
// that every check that uses it (readiness, large uploads) holds for
// every target.
//
// With -keys every target's closed loop runs the same Lua request path,
// a key list with one entry for the one-key targets, so that wrk's own
// per-request cost is the same on both sides; and every keygate target
// gets a daily quota on its live limit (far above what the run sends),
// so that the Redis limiter writes its quota keys and the TTL audit below
// has them to check.
//
// Before each rep a many-keys target is warmed: every key is sent once,
// so that the keystore lookups, the limiter's state and the usage counts
// cover N active keys while the load is measured. After the load of each
// rep the bench reads, before the target restarts: keygate's RSS; the
// distinct key ids in its access log (all of the warm-up, and those the
// measured load used); and for keygate-redis-keys redis-server's
// used_memory and a SCAN of every key with its TTL.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/keystore"
)

// manyKeysSuffix names the targets whose keystore holds the N keys.
const manyKeysSuffix = "-keys"

func isManyKeys(name string) bool { return strings.HasSuffix(name, manyKeysSuffix) }

// keysState is what -keys made and measured.
type keysState struct {
	many     []string // the N keys' plaintext, b.key first
	manyFile string   // their plaintext, one a line
	oneFile  string   // b.key alone
	luaFile  string   // their hashes and ids for nginx-lua-keys (nginxLuaKeys)

	mu    sync.Mutex
	stats map[string]*keyStats // by target name
}

// keyStats are one keygate target's figures over every rep.
type keyStats struct {
	redisAddr string
	rssKiB    []int64 // VmRSS right after each rep's load, summed over the process tree
	pssKiB    []int64 // and its proportional set size (pssKiB)
	// warmed and loaded are the distinct key ids keygate logged in the
	// warm-up and in the measured load, each rep; used is every one seen.
	warmed, loaded []int
	used           map[string]struct{}
	logOffset      int64 // the access log's size after the warm-up
	memBefore      int64 // redis-server's used_memory before the first warm-up
	memAfter       int64 // and after the last rep's load
	audit          []ttlCount
}

// ttlCount is one kind of Redis key: how many there are, and how many
// have no TTL.
type ttlCount struct {
	kind         string
	keys, noTTL  int
	noTTLKeys    []string
	members      int64 // for sorted sets without TTL: their members
	memoryBytes  int64 // MEMORY USAGE of such keys
	isPerKeyData bool
}

func (b *bench) keyStats(name string) *keyStats {
	b.keys.mu.Lock()
	defer b.keys.mu.Unlock()
	if b.keys.stats == nil {
		b.keys.stats = map[string]*keyStats{}
	}
	s := b.keys.stats[name]
	if s == nil {
		s = &keyStats{used: map[string]struct{}{}, memBefore: -1}
		b.keys.stats[name] = s
	}
	return s
}

// keysBin is bin for the many-keys targets when -keys is set, else ""
// (which skips them).
func (b *bench) keysBin(bin string) string {
	if b.o.Keys <= 0 {
		return ""
	}
	return bin
}

// keysNoteRedis remembers the redis-server of a keygate target.
func (b *bench) keysNoteRedis(name, addr string) {
	if b.o.Keys > 0 && addr != "" {
		b.keyStats(name).redisAddr = addr
	}
}

// keysConfig adapts a keygate config written by keygateConfig: a
// many-keys target reads the N-key keystore, and with -keys every
// keygate's live limit has a daily quota (see the file comment).
func (b *bench) keysConfig(name, cfg string) string {
	if b.o.Keys <= 0 {
		return cfg
	}
	if isManyKeys(name) {
		one := filepath.Join(b.dir, "keys", "keys.yaml")
		cfg = strings.Replace(cfg, strconv.Quote(one), strconv.Quote(b.manyKeystore()), 1)
	}
	return strings.Replace(cfg, "live: { rate: 1000000, per: 1s, burst: 1000000000 }",
		"live: { rate: 1000000, per: 1s, burst: 1000000000, quota: { requests: 1000000000000, per: 24h } }", 1)
}

// manyKeystore is the N-key keystore file, in a directory of its own (keygate
// watches its keystore's directory).
func (b *bench) manyKeystore() string { return filepath.Join(b.dir, "keys-many", "keys.yaml") }

// prepareKeys writes the N-key keystore: the record of the key that
// `keygate keys issue` wrote to issued, and N-1 more minted here for
// product extraction, env live and the bench context. It writes the
// plaintext files the wrk scripts read.
func (b *bench) prepareKeys(issued string) error {
	if b.o.Keys <= 0 {
		return nil
	}
	start := time.Now()
	data, err := os.ReadFile(issued)
	if err != nil {
		return err
	}
	recs, err := keystore.ParseFile(data)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(recs, func(r keystore.Record) bool { return r.Hash == keystore.HashKey(b.key) })
	if i < 0 {
		return fmt.Errorf("the issued key is not in %s", issued)
	}
	all := make([]keystore.Record, 0, b.o.Keys)
	all = append(all, recs[i])
	many := make([]string, 0, b.o.Keys)
	many = append(many, b.key)
	now := time.Now()
	req := keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: benchContext, Name: "bench"}
	for len(many) < b.o.Keys {
		key, rec, err := keystore.NewRecord(req, now)
		if err != nil {
			return err
		}
		many = append(many, key)
		all = append(all, rec)
	}
	file, err := keystore.MarshalFile(all)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(b.manyKeystore()), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(b.manyKeystore(), file, 0o600); err != nil {
		return err
	}
	b.keys.many = many
	b.keys.luaFile = filepath.Join(b.dir, "nginx-lua-keys-many.txt")
	if err := os.WriteFile(b.keys.luaFile, nginxLuaKeys(all), 0o600); err != nil {
		return err
	}
	b.keys.manyFile = filepath.Join(b.dir, "keys-many.txt")
	b.keys.oneFile = filepath.Join(b.dir, "keys-one.txt")
	if err := os.WriteFile(b.keys.manyFile, []byte(strings.Join(many, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(b.keys.oneFile, []byte(b.key+"\n"), 0o600); err != nil {
		return err
	}
	b.logf("keystore of %d keys written in %s (%d MiB)", len(many), time.Since(start).Round(time.Millisecond), len(file)>>20)
	return nil
}

// keyAt is the key of the open loop's i-th request to t.
func (b *bench) keyAt(t *target, i int) string {
	if b.o.Keys <= 0 || !isManyKeys(t.name) {
		return b.key
	}
	return b.keys.many[i%len(b.keys.many)]
}

// wrkScriptFor is the closed loop's wrk script for t: a bearer target's
// token (bearer.go); wrkScript without -keys; else the key-list script (N
// keys for a many-keys target, the one key for any other).
func (b *bench) wrkScriptFor(ctx context.Context, t *target, size int) (string, error) {
	if isBearer(t.name) {
		name, value, err := b.credential(ctx, t, 0)
		if err != nil {
			return "", err
		}
		return b.wrkScriptWith(size, name, value, "-"+t.name)
	}
	if b.o.Keys <= 0 {
		return b.wrkScript(size)
	}
	body, ctype := multipartBody(size, true)
	bp := filepath.Join(b.dir, fmt.Sprintf("body-%d.bin", size))
	if err := os.WriteFile(bp, body, 0o600); err != nil {
		return "", err
	}
	list, n := b.keys.oneFile, 1
	if isManyKeys(t.name) {
		list, n = b.keys.manyFile, len(b.keys.many)
	}
	lua := fmt.Sprintf(`-- keygate bench-peers -keys: multipart POST /sync, contextId first; the
-- x-api-key of each request is the next of a list of keys, round robin
-- from an offset of each thread (thread t of T starts at t/T of the list).
local f = assert(io.open(%q, "rb"))
local body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.body = body
local keys = {}
for line in io.lines(%q) do keys[#keys + 1] = line end
assert(#keys == %d, "key list: want %d keys, got " .. #keys)
local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
local i = 0
local headers = {["Content-Type"] = %q}
function init(args)
  i = math.floor(#keys * tid / %d)
end
function request()
  i = i %% #keys + 1
  headers["X-Api-Key"] = keys[i]
  return wrk.format(nil, nil, headers, body)
end
`, bp, list, n, n, ctype, wrkThreads)
	sp := filepath.Join(b.dir, fmt.Sprintf("sync-%d-%s.lua", size, t.name))
	return sp, os.WriteFile(sp, []byte(lua), 0o600)
}

// wrkThreads is closedLoop's -t.
const wrkThreads = 2

// warmKeys sends every key of a many-keys target once (a small body, 32
// at a time) and checks each is answered 200, so that the load that
// follows runs with N active keys. It first reads redis-server's
// used_memory, once per target, as the "before" of the memory figure.
func (b *bench) warmKeys(ctx context.Context, t *target) error {
	if b.o.Keys <= 0 || !isManyKeys(t.name) {
		return nil
	}
	st := b.keyStats(t.name)
	if st.redisAddr != "" && st.memBefore < 0 {
		m, err := usedMemory(ctx, st.redisAddr)
		if err != nil {
			return err
		}
		st.memBefore = m
	}
	start := time.Now()
	body, ctype := multipartBody(64, true)
	tr := &http.Transport{MaxIdleConnsPerHost: 32, DisableCompression: true, TLSClientConfig: b.clientTLS()}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var next, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(b.keys.many) || ctx.Err() != nil {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.scheme()+t.addr+"/sync", bytes.NewReader(body))
				req.Header.Set("Content-Type", ctype)
				req.Header.Set("X-Api-Key", b.keys.many[i])
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%s: warm-up: %d of %d keys not answered 200 (first: %v)", t.name, n, len(b.keys.many), firstErr.Load())
	}
	// The access log is buffered: let it reach the file before the
	// measured load's part of it starts.
	time.Sleep(logSettle)
	st.logOffset = fileSize(filepath.Join(b.dir, t.name+".log"))
	b.logf("%s: warm-up sent each of %d keys once in %s", t.name, len(b.keys.many), time.Since(start).Round(time.Millisecond))
	return nil
}

// logSettle is how long keygate takes to write its buffered access lines
// and to flush its usage counts (usage.flush_interval is 1s).
const logSettle = 1500 * time.Millisecond

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// afterKeysLoad reads, after a rep's load of a target that checks keys
// and before it restarts: its memory; for a keygate many-keys target the
// distinct key ids in its access log; for keygate-redis-keys
// redis-server's used_memory and the TTL audit.
func (b *bench) afterKeysLoad(ctx context.Context, t *target) error {
	if b.o.Keys <= 0 || !checksKeys(t.name) {
		return nil
	}
	st := b.keyStats(t.name)
	time.Sleep(logSettle)
	st.rssKiB = append(st.rssKiB, memKiB(t.root.Process.Pid, "VmRSS"))
	st.pssKiB = append(st.pssKiB, pssKiB(t.root.Process.Pid))
	if !isManyKeys(t.name) || !strings.HasPrefix(t.name, "keygate") {
		return nil
	}
	warm, load, err := distinctKeyIDs(filepath.Join(b.dir, t.name+".log"), st.logOffset, st.used)
	if err != nil {
		return err
	}
	st.warmed, st.loaded = append(st.warmed, warm), append(st.loaded, load)
	b.logf("%s: keys used: %d in the warm-up, %d in the measured load; RSS %d MiB", t.name, warm, load, st.rssKiB[len(st.rssKiB)-1]>>10)
	if st.redisAddr == "" {
		return nil
	}
	if st.memAfter, err = usedMemory(ctx, st.redisAddr); err != nil {
		return err
	}
	st.audit, err = auditTTL(ctx, st.redisAddr)
	return err
}

var reKeyID = regexp.MustCompile(`"key_id":"([^"]+)"`)

// distinctKeyIDs counts the distinct key ids of the access log's request
// lines before offset and from it, adding each to used.
func distinctKeyIDs(path string, offset int64, used map[string]struct{}) (before, after int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	seen := [2]map[string]struct{}{{}, {}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pos int64
	for sc.Scan() {
		line := sc.Bytes()
		part := 0
		if pos >= offset {
			part = 1
		}
		pos += int64(len(line)) + 1
		if m := reKeyID.FindSubmatch(line); m != nil {
			id := string(m[1])
			seen[part][id] = struct{}{}
			used[id] = struct{}{}
		}
	}
	return len(seen[0]), len(seen[1]), sc.Err()
}

func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 5 * time.Second})
}

// usedMemory is redis-server's INFO memory used_memory, bytes.
func usedMemory(ctx context.Context, addr string) (int64, error) {
	c := redisClient(addr)
	defer c.Close()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("redis %s: INFO memory has no used_memory", addr)
}

// keyKind groups the Redis keys keygate writes (under its key prefix) by
// what they are.
func keyKind(k string) string {
	switch {
	case strings.Contains(k, "rl:{"):
		return "rate-limit bucket (rl:{id})"
	case strings.Contains(k, "q:{"):
		return "quota counter (q:{id})"
	case strings.Contains(k, "usage:{") && strings.Contains(k, "}:methods:"):
		return "usage by method (usage:{id}:methods:DAY)"
	case strings.Contains(k, "usage:{"):
		return "usage counts (usage:{id}:HOUR)"
	case strings.Contains(k, "usage:last:{lu:"):
		return "last uses (usage:last:{lu:B})"
	case strings.Contains(k, "usage:last_api_key:{lu:"):
		return "last API key uses (usage:last_api_key:{lu:B})"
	}
	return k
}

// auditTTL SCANs every key of redis-server at addr and counts, by kind,
// those without a TTL. A key without TTL that holds one entry per key id
// (a sorted set) is per-key data too: its members and size are reported.
func auditTTL(ctx context.Context, addr string) ([]ttlCount, error) {
	c := redisClient(addr)
	defer c.Close()
	byKind := map[string]*ttlCount{}
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return nil, err
		}
		ttls := make([]*redis.DurationCmd, len(keys))
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				ttls[i] = p.PTTL(ctx, k)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		for i, k := range keys {
			ttl, err := ttls[i].Result()
			if err != nil {
				return nil, err
			}
			if ttl == -2*time.Nanosecond || ttl == -2*time.Millisecond { // gone since the SCAN
				continue
			}
			kind := keyKind(k)
			tc := byKind[kind]
			if tc == nil {
				tc = &ttlCount{kind: kind}
				byKind[kind] = tc
			}
			tc.keys++
			if ttl < 0 {
				tc.noTTL++
				tc.noTTLKeys = append(tc.noTTLKeys, k)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	out := make([]ttlCount, 0, len(byKind))
	for _, tc := range byKind {
		if tc.noTTL > 0 {
			for _, k := range tc.noTTLKeys {
				if typ, _ := c.Type(ctx, k).Result(); typ == "zset" {
					n, _ := c.ZCard(ctx, k).Result()
					m, _ := c.MemoryUsage(ctx, k, 0).Result()
					tc.members, tc.memoryBytes, tc.isPerKeyData = tc.members+n, tc.memoryBytes+m, true
				}
			}
		}
		out = append(out, *tc)
	}
	slices.SortFunc(out, func(a, b ttlCount) int { return strings.Compare(a.kind, b.kind) })
	return out, nil
}

// printKeysTables prints the -keys comparison: each many-keys target
// against its one-key peer, then memory.
func (b *bench) printKeysTables(w io.Writer, r *results) {
	if b.o.Keys <= 0 {
		return
	}
	sz := sizes(b.o)
	rps := func(name string, size int) float64 {
		return median(r.closed[name][size], func(c closedResult) float64 { return c.rps })
	}
	cpu := func(name string, size int) float64 {
		return median(r.closed[name][size], func(c closedResult) float64 { return c.cpuPerReq })
	}
	p99 := func(name string, size int) float64 {
		return median(r.open[name][size], func(o openResult) float64 { return float64(o.p99) / float64(time.Millisecond) })
	}
	fmt.Fprintf(w, "\nMany keys: the target holds %d keys (keygate in its keystore, nginx-lua in its Lua table) and the load spreads evenly over them (wrk: round robin from an offset per thread; open loop: round robin), against the same target with one key, in the same run. Every key is sent once before each rep (warm-up, not measured). Closed loop rps and CPU µs/req, open-loop p99 (median over reps).\n\n", b.o.Keys)
	fmt.Fprint(w, "| many keys | one key |")
	for _, s := range sz {
		fmt.Fprintf(w, " %s rps × one key | CPU µs/req one | many | p99 @ %d/s one | many |", sizeName(s), rate(b.o, s))
	}
	fmt.Fprint(w, " keys used: warm-up | measured load |\n|---|---|")
	for range sz {
		fmt.Fprint(w, "---|---|---|---|---|")
	}
	fmt.Fprint(w, "---|---|\n")
	for _, name := range r.order {
		if !isManyKeys(name) {
			continue
		}
		one := strings.TrimSuffix(name, manyKeysSuffix)
		fmt.Fprintf(w, "| %s | %s |", name, one)
		for _, s := range sz {
			fmt.Fprintf(w, " %s | %.0f | %.0f | %.2f | %.2f |", ratio(rps(name, s), rps(one, s)), cpu(one, s), cpu(name, s), p99(one, s), p99(name, s))
		}
		st := b.keyStats(name)
		fmt.Fprintf(w, " %s | %s |\n", minMax(st.warmed), minMax(st.loaded))
	}

	fmt.Fprint(w, "\nMemory of each target that checks keys right after each rep's load (MiB, the largest over reps; keygate's ratelimit.local_max_keys bounds the local limiter's ids, default 100000): RSS summed over the target's processes, and PSS, which counts a page its processes share once (nginx's workers share the Lua table the master loaded, and the limit_req zone).\n\n| target | RSS MiB | PSS MiB |\n|---|---|---|\n")
	for _, name := range r.order {
		if st := b.keys.stats[name]; st != nil && len(st.rssKiB) > 0 {
			fmt.Fprintf(w, "| %s | %.0f | %.0f |\n", name, float64(slices.Max(st.rssKiB))/1024, float64(slices.Max(st.pssKiB))/1024)
		}
	}
	for _, name := range r.order {
		st := b.keys.stats[name]
		if st == nil || !isManyKeys(name) || st.redisAddr == "" || st.memBefore < 0 {
			continue
		}
		n := len(st.used)
		per := "–"
		if n > 0 {
			per = fmt.Sprintf("%.0f", float64(st.memAfter-st.memBefore)/float64(n))
		}
		fmt.Fprintf(w, "\n%s: redis-server used_memory %.1f MiB before the first warm-up, %.1f MiB after the last load; %d distinct keys used: %s bytes per active key.\n\n",
			name, float64(st.memBefore)/(1<<20), float64(st.memAfter)/(1<<20), n, per)
		fmt.Fprint(w, "Redis keys after the last load (SCAN, PTTL each):\n\n| kind | keys | without TTL |\n|---|---|---|\n")
		for _, a := range st.audit {
			note := ""
			if a.isPerKeyData {
				note = fmt.Sprintf(" (sorted sets of %d members in all, one per key id, %d bytes: %.0f B per key)", a.members, a.memoryBytes, float64(a.memoryBytes)/math.Max(1, float64(a.members)))
			}
			fmt.Fprintf(w, "| %s | %d | %d%s |\n", a.kind, a.keys, a.noTTL, note)
		}
	}
}

func minMax(xs []int) string {
	if len(xs) == 0 {
		return "–"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// profileKeys is the keygate that -profile runs: with -keys the one with
// N keys (its name, and its config beside cfg), else "keygate" and cfg.
func (b *bench) profileKeys(cfg, addr, upAddr, backend, redisAddr string) (string, string, error) {
	if b.o.Keys <= 0 {
		return "keygate", cfg, nil
	}
	if err := b.prepareKeys(filepath.Join(b.dir, "keys", "keys.yaml")); err != nil {
		return "", "", err
	}
	name := "keygate" + manyKeysSuffix
	cfg, _, err := b.keygateConfig(name, addr, upAddr, backend, redisAddr)
	return name, cfg, err
}
