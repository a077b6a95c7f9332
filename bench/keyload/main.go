// Command keyload measures the keystore at scale: how long a store of N
// keys takes to load (and reload) from a keystore file and from Redis,
// the RSS it adds per key, and redis-server's longest command during the
// load (SLOWLOG). Each measurement runs in its own process, so that the
// empty process it is measured against holds nothing else:
//
//	keyload -mode gen-file -keys 1000000 -file /tmp/keys.yaml
//	keyload -mode load-file -file /tmp/keys.yaml [-revoke 0.01 -replace 0.01] [-limits] [-reloadprofile /tmp/reload]
//	keyload -mode fill-redis -keys 1000000 [-consumers 100000] -redis 127.0.0.1:6379
//	keyload -mode load-redis -redis 127.0.0.1:6379 [-page 100] [-limits] [-heapprofile FILE]
//	keyload -mode churn -redis 127.0.0.1:6379 -rate 100 -duration 30s
//
// load-file loads the file, then makes the store reload it: the file is
// touched, or rewritten with -revoke and -replace (the fractions of keys
// revoked and of keys replaced by a new one) and renamed over the old one,
// as FileAdmin does. It reports the reload's wall and CPU time, the peak
// RSS during it and the RSS right after it; -reloadprofile writes a CPU
// profile of the reload and heap profiles from before and after it (read
// the reload's allocations with pprof -sample_index=alloc_space
// -diff_base PREFIX.before.heap PREFIX.after.heap).
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
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

func main() {
	mode := flag.String("mode", "", "gen-file, load-file, fill-redis or load-redis")
	n := flag.Int("keys", 1_000_000, "number of keys (gen-file, fill-redis)")
	file := flag.String("file", "/tmp/keyload.yaml", "keystore file")
	addr := flag.String("redis", "127.0.0.1:6379", "redis-server address")
	rate := flag.Int("rate", 100, "changes per second (churn)")
	dur := flag.Duration("duration", 30*time.Second, "how long to churn (churn)")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	reloadProf := flag.String("reloadprofile", "", "load-file: write PREFIX.cpu (the reload's CPU profile) and PREFIX.before.heap, PREFIX.after.heap")
	revoke := flag.Float64("revoke", 0, "load-file: the fraction of keys the reloaded file revokes")
	replace := flag.Float64("replace", 0, "load-file: the fraction of keys the reloaded file replaces by new ones")
	limits := flag.Bool("limits", false, "load-file, load-redis: resolve each key's limit as keygate does with its default config (each key then holds its resolved limit)")
	consumers := flag.Int("consumers", 0, "fill-redis: also make this many consumers, the keys spread over them")
	heapProf := flag.String("heapprofile", "", "load-redis: write a heap profile of the loaded store to this file")
	page := flag.Int("page", 0, "load-redis: the store's PageSize (HSCAN COUNT); 0 is its default")
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
		err = loadFile(*file, *revoke, *replace, *reloadProf, *limits)
	case "fill-redis":
		err = fillRedis(*addr, *n, *consumers)
	case "load-redis":
		err = loadRedis(*addr, *page, *limits, *heapProf)
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
func rss() int64 { return procStatus("VmRSS:") }

// peakRSS is the process's peak resident set since it started or since
// the last resetPeakRSS, in bytes.
func peakRSS() int64 { return procStatus("VmHWM:") }

// resetPeakRSS makes peakRSS start again from the current RSS (Linux
// 4.0 and later; otherwise peakRSS keeps the process's peak).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func procStatus(field string) int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
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

// resolver is keygate's default limit resolver with limits, else nil
// (the store then resolves nothing).
func resolver(limits bool) (*policy.Resolver, error) {
	if !limits {
		return nil, nil
	}
	return config.Default().Resolver()
}

func loadFile(path string, revoke, replace float64, prof string, limits bool) error {
	res, err := resolver(limits)
	if err != nil {
		return err
	}
	base := rss()
	start, c0 := time.Now(), cpu()
	reloaded := make(chan int, 4)
	s, err := keystore.OpenFile(keystore.FileConfig{Path: path, Limits: res,
		OnReload: func(n int, err error) {
			if err != nil {
				fmt.Fprintln(os.Stderr, "keyload: reload:", err)
			}
			reloaded <- n
		}})
	if err != nil {
		return err
	}
	took, c1 := time.Since(start), cpu()
	<-reloaded
	fmt.Printf("file load: peak RSS above the empty process %.0f B/key\n", float64(peakRSS()-base)/float64(s.Len()))
	report("file load", took, c1-c0, base, s)
	// Reload: rewrite or touch the file and time until the store took it.
	what := "touched"
	if revoke > 0 || replace > 0 {
		what = fmt.Sprintf("%.3g%% of keys revoked, %.3g%% replaced", revoke*100, replace*100)
		if err := mutateFile(path, revoke, replace); err != nil {
			return err
		}
	}
	// What the rewrite left is not the reload's.
	runtime.GC()
	debug.FreeOSMemory()
	if prof != "" {
		if err := writeHeap(prof + ".before.heap"); err != nil {
			return err
		}
		f, err := os.Create(prof + ".cpu")
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	resetPeakRSS()
	start, c0 = time.Now(), cpu()
	if what == "touched" {
		now := time.Now()
		err = os.Chtimes(path, now, now)
	} else {
		err = os.Rename(path+".new", path)
	}
	if err != nil {
		return err
	}
	<-reloaded
	took, c1 = time.Since(start), cpu()
	if prof != "" {
		pprof.StopCPUProfile()
	}
	peak := peakRSS()
	if prof != "" {
		if err := writeHeap(prof + ".after.heap"); err != nil {
			return err
		}
	}
	fmt.Printf("file reload (%s): peak RSS above the empty process %.0f B/key\n", what, float64(peak-base)/float64(s.Len()))
	report("file reload", took, c1-c0, base, s)
	return s.Close()
}

// writeHeap writes a heap profile as of now (a heap profile shows the
// heap as of the last GC).
func writeHeap(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return err
	}
	return f.Close()
}

// mutateFile writes path+".new": path with the fraction revoke of its
// keys revoked and the fraction replace given a new hash and id (a key
// removed and another added), spread evenly over the file.
func mutateFile(path string, revoke, replace float64) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(path + ".new")
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	w := bufio.NewWriterSize(out, 1<<20)
	i := -1
	var revokeAcc, replaceAcc float64
	doRevoke, doReplace := false, false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "  - id: "):
			i++
			revokeAcc += revoke
			replaceAcc += replace
			doRevoke, doReplace = revokeAcc >= 1, replaceAcc >= 1
			if doRevoke {
				revokeAcc--
			}
			if doReplace {
				replaceAcc--
				l = "  - id: key_" + randomHex(8)
			}
		case doReplace && strings.HasPrefix(l, "    hash: "):
			var h keystore.Hash
			_, _ = rand.Read(h[:])
			l = "    hash: " + h.String()
		case doRevoke && l == "    status: active":
			l = "    status: revoked"
		}
		w.WriteString(l)
		w.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Close()
}

func client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
}

func fillRedis(addr string, n, consumers int) error {
	c := client(addr)
	defer c.Close()
	ctx := context.Background()
	a := &keystore.RedisAdmin{Client: c}
	start := time.Now()
	cons := make([]keystore.Consumer, consumers)
	for i := range cons {
		var err error
		if cons[i], err = keystore.NewConsumer(keystore.Consumer{Name: "customer " + strconv.Itoa(i)}, start); err != nil {
			return err
		}
	}
	if _, _, err := a.ImportConsumers(ctx, cons); err != nil {
		return err
	}
	if consumers > 0 {
		fmt.Printf("filled %d consumers in %s\n", consumers, time.Since(start).Round(time.Millisecond))
	}
	batch := make([]keystore.Record, 0, 1000)
	for i := range n {
		r := record(i)
		if consumers > 0 {
			r.Consumer = cons[i%consumers].ID
		}
		batch = append(batch, r)
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

func loadRedis(addr string, page int, limits bool, heapProf string) error {
	res, err := resolver(limits)
	if err != nil {
		return err
	}
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
	s, err := keystore.OpenRedis(keystore.RedisConfig{Client: c, PageSize: page, Limits: res})
	if err != nil {
		return err
	}
	for !s.Ready() {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	report("redis load", took, cpu()-c0, base, s)
	if heapProf != "" {
		if err := writeHeap(heapProf); err != nil {
			return err
		}
	}
	logs, err := c.SlowLogGet(ctx, 100000).Result()
	if err != nil {
		return err
	}
	var longest redis.SlowLog
	byCmd := map[string][]time.Duration{}
	for _, l := range logs {
		if l.Duration > longest.Duration {
			longest = l
		}
		if len(l.Args) > 0 {
			name := strings.ToUpper(l.Args[0])
			byCmd[name] = append(byCmd[name], l.Duration)
		}
	}
	fmt.Printf("redis load: %d commands logged, longest %s: %v\n", len(logs), longest.Duration, longest.Args[:min(len(longest.Args), 5)])
	if len(logs) == 100000 {
		fmt.Println("redis load: SLOWLOG was full (100000): the earliest commands are not counted")
	}
	for _, name := range slices.Sorted(maps.Keys(byCmd)) {
		d := byCmd[name]
		slices.Sort(d)
		over := len(d) - sort.Search(len(d), func(i int) bool { return d[i] > 2*time.Millisecond })
		fmt.Printf("redis load: %-8s %6d commands: median %s, p99 %s, max %s; %d over 2 ms\n",
			name, len(d), d[len(d)/2], d[min(len(d)-1, len(d)*99/100)], d[len(d)-1], over)
	}
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
