// Command keyload measures the keystore at scale: how long a store of N
// keys takes to load (and reload) from a keystore file and from Redis,
// the RSS it adds per key, and redis-server's longest command during the
// load (SLOWLOG). Each measurement runs in its own process, so that the
// empty process it is measured against holds nothing else:
//
//	keyload -mode gen-file -keys 1000000 -file /tmp/keys.yaml
//	keyload -mode load-file -file /tmp/keys.yaml
//	keyload -mode fill-redis -keys 1000000 -redis 127.0.0.1:6379
//	keyload -mode load-redis -redis 127.0.0.1:6379
//	keyload -mode churn -redis 127.0.0.1:6379 -rate 100 -duration 30s
//
// churn issues and revokes keys through the admin at -rate changes a
// second (half each) while two replicas' stores run, and reports how long
// each revocation took to be refused on both.
//
// Records are random (random hashes, ids, one of 1000 consumers'
// contexts), in keygate's own formats.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/keystore"
)

func main() {
	mode := flag.String("mode", "", "gen-file, load-file, fill-redis or load-redis")
	n := flag.Int("keys", 1_000_000, "number of keys (gen-file, fill-redis)")
	file := flag.String("file", "/tmp/keyload.yaml", "keystore file")
	addr := flag.String("redis", "127.0.0.1:6379", "redis-server address")
	rate := flag.Int("rate", 100, "changes per second (churn)")
	dur := flag.Duration("duration", 30*time.Second, "how long to churn (churn)")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "keyload:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	switch *mode {
	case "gen-file":
		err = genFile(*file, *n)
	case "load-file":
		err = loadFile(*file)
	case "fill-redis":
		err = fillRedis(*addr, *n)
	case "load-redis":
		err = loadRedis(*addr)
	case "churn":
		err = churn(*addr, *rate, *dur)
	default:
		err = fmt.Errorf("-mode: want gen-file, load-file, fill-redis or load-redis, got %q", *mode)
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "keyload:", err)
		os.Exit(1)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var contexts = func() []string {
	out := make([]string, 1000)
	for i := range out {
		h := randomHex(16)
		out[i] = h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
	}
	return out
}()

func record(i int) keystore.Record {
	var h keystore.Hash
	_, _ = rand.Read(h[:])
	return keystore.Record{
		ID: "key_" + randomHex(8), Name: "app " + strconv.Itoa(i%5000), Hash: h,
		Product: keystore.Extraction, Env: keystore.Live, Context: contexts[i%len(contexts)],
		CreatedAt: time.Now().UTC().Truncate(time.Second), Status: keystore.Active,
	}
}

// genFile writes n records as FileAdmin lays them out.
func genFile(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "# keygate keystore: SHA-256 hashes of API keys, never the keys.\nversion: 1\nkeys:\n")
	for i := range n {
		r := record(i)
		fmt.Fprintf(w, "  - id: %s\n    name: %s\n    hash: %s\n    product: %s\n    env: %s\n    context: %s\n    created_at: %s\n    status: %s\n",
			r.ID, r.Name, r.Hash, r.Product, r.Env, r.Context, r.CreatedAt.Format(time.RFC3339), r.Status)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// rss is the process's resident set, in bytes.
func rss() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

type sizer interface{ Len() int }

// cpu is the CPU time (user and system) the process has used so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report prints RSS above base per key, as the process holds it right
// after the load and after the runtime returned freed memory.
func report(what string, took, cpuTime time.Duration, base int64, s sizer) {
	n := s.Len()
	after := rss()
	runtime.GC()
	debug.FreeOSMemory()
	settled := rss()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("%s: %d keys in %s (CPU %s); RSS above the empty process %.0f B/key right after, %.0f B/key after GC and scavenge; heap in use %.0f B/key\n",
		what, n, took.Round(time.Millisecond), cpuTime.Round(time.Millisecond), float64(after-base)/float64(n), float64(settled-base)/float64(n), float64(ms.HeapInuse)/float64(n))
}

func loadFile(path string) error {
	base := rss()
	start, c0 := time.Now(), cpu()
	reloaded := make(chan int, 4)
	s, err := keystore.OpenFile(keystore.FileConfig{Path: path, PollInterval: 100 * time.Millisecond, NoWatch: true,
		OnReload: func(n int, err error) { reloaded <- n }})
	if err != nil {
		return err
	}
	took, c1 := time.Since(start), cpu()
	<-reloaded
	report("file load", took, c1-c0, base, s)
	// Reload: touch the file and time until the store swapped it in.
	now := time.Now()
	start, c0 = time.Now(), cpu()
	if err := os.Chtimes(path, now, now); err != nil {
		return err
	}
	<-reloaded
	report("file reload", time.Since(start), cpu()-c0, base, s)
	return s.Close()
}

func client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
}

func fillRedis(addr string, n int) error {
	c := client(addr)
	defer c.Close()
	ctx := context.Background()
	a := &keystore.RedisAdmin{Client: c}
	start := time.Now()
	batch := make([]keystore.Record, 0, 1000)
	for i := range n {
		batch = append(batch, record(i))
		if len(batch) == cap(batch) || i == n-1 {
			if _, _, err := a.ImportBatch(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	fmt.Printf("filled %d keys in %s\n", n, time.Since(start).Round(time.Millisecond))
	return a.AnnounceAll(ctx)
}

func loadRedis(addr string) error {
	c := client(addr)
	defer c.Close()
	ctx := context.Background()
	// Log every command, then read the longest.
	for _, args := range [][]any{{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, {"CONFIG", "SET", "slowlog-max-len", "100000"}, {"SLOWLOG", "RESET"}} {
		if err := c.Do(ctx, args...).Err(); err != nil {
			return err
		}
	}
	base := rss()
	start, c0 := time.Now(), cpu()
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: c})
	if err != nil {
		return err
	}
	for !s.Ready() {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	report("redis load", took, cpu()-c0, base, s)
	logs, err := c.SlowLogGet(ctx, 100000).Result()
	if err != nil {
		return err
	}
	var longest redis.SlowLog
	for _, l := range logs {
		if l.Duration > longest.Duration {
			longest = l
		}
	}
	fmt.Printf("redis load: %d commands logged, longest %s: %v\n", len(logs), longest.Duration, longest.Args[:min(len(longest.Args), 5)])
	_ = c.Do(ctx, "CONFIG", "SET", "slowlog-log-slower-than", "10000").Err()
	return s.Close()
}

func churn(addr string, rate int, dur time.Duration) error {
	ctx := context.Background()
	admin := &keystore.RedisAdmin{Client: client(addr)}
	var stores []*keystore.RedisStore
	for range 2 {
		s, err := keystore.OpenRedis(keystore.RedisConfig{Client: client(addr)})
		if err != nil {
			return err
		}
		defer s.Close()
		stores = append(stores, s)
	}
	for _, s := range stores {
		for !s.Ready() {
			time.Sleep(10 * time.Millisecond)
		}
	}
	type pending struct {
		hash keystore.Hash
		at   time.Time
	}
	var (
		issued  []keystore.Record
		waiting []pending
		lat     []time.Duration
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start := time.Now()
	end := start.Add(dur)
	changes := 0
	for i := 0; time.Now().Before(end) || len(waiting) > 0; i++ {
		if time.Now().Before(end) {
			<-tick.C
			if i%2 == 0 || len(issued) == 0 {
				_, rec, err := admin.Issue(ctx, keystore.IssueRequest{Product: keystore.Registry, Env: keystore.Test})
				if err != nil {
					return err
				}
				issued = append(issued, rec)
				changes++
			} else {
				rec := issued[len(issued)-1]
				issued = issued[:len(issued)-1]
				if _, err := admin.Revoke(ctx, rec.ID); err != nil {
					return err
				}
				waiting = append(waiting, pending{rec.Hash, time.Now()})
				changes++
			}
		} else {
			time.Sleep(time.Millisecond)
		}
		// Which revocations both replicas refuse by now.
		kept := waiting[:0]
		for _, w := range waiting {
			seen := true
			for _, s := range stores {
				if r, ok, _ := s.Lookup(ctx, w.hash); !ok || r.StateAt(time.Now()) != keystore.Revoked {
					seen = false
				}
			}
			if seen {
				lat = append(lat, time.Since(w.at))
			} else if time.Since(w.at) > 10*time.Second {
				return fmt.Errorf("a revocation not seen on both replicas within 10 s")
			} else {
				kept = append(kept, w)
			}
		}
		waiting = kept
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("churn: %.0f changes/s (asked %d) for %s over %d keys; %d revocations refused on both replicas after p50 %s, p99 %s, max %s\n",
		float64(changes)/dur.Seconds(), rate, dur, stores[0].Len(), len(lat), q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	return nil
}
