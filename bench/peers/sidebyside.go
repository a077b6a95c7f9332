package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Side by side: a round loads a keygate target and its base at the same
// time, each under its own wrk (-t1 -c16: together the -t2 -c32 of a
// closed loop), against the one upstream. Both then run on the same two
// cores in the same seconds, so what drifts between runs on a shared
// machine (the hypervisor's steal, the other guests, the CPU's speed)
// moves both alike, and the ratio of their CPU per request in a round is
// the comparison. Runs one after another, even alternated, differ by up
// to a fifth here between two copies of one binary; side by side, two
// copies differ by a few percent a round.
//
// In TLS mode (-tls) every pair runs twice a size: over HTTP/1.1 with
// wrk over https, and over HTTP/2 with h2load -t1 -c16 -m10 each (their
// -t2 -c32 halved, as wrk's are).

// sidePairs are the targets compared side by side: each keygate target
// with its base; when the bare proxy or Caddy is among the targets,
// keygate with each limiter against the bare proxy and keygate against
// Caddy (issue 21's bounds, in the same seconds); when bare-redis is,
// keygate's Redis limiter against the bare proxy with redis_rate (the
// floor of an exact shared limit in Redis), and with bare too, that floor
// against the bare proxy (what the limit alone costs it); when traefik-redis
// is, keygate's Redis limiter against Traefik's (a Go proxy's exact
// shared limit in Redis, traefik.go); and with -keys, keygate
// with N keys against keygate with one, for each limiter (the load spread
// over the N keys against the same load on one key, in the same seconds).
var sidePairs = [][2]string{
	{"keygate", "keygate-base"},
	{"keygate-redis", "keygate-base-redis"},
	{"keygate-bearer", "keygate-base-bearer"},
	{"keygate", "bare"},
	{"keygate-redis", "bare"},
	{"keygate-redis", "bare-redis"},
	{"bare-redis", "bare"},
	{"keygate-redis", "traefik-redis"},
	{"keygate", "caddy"},
	{"keygate-keys", "keygate"},
	{"keygate-redis-keys", "keygate-redis"},
}

// sideRound is one round of one pair at one size, over one protocol in
// TLS mode ("" in plain mode).
type sideRound struct {
	pair      [2]string
	size      int
	proto     string
	cur, base closedResult
}

// cpuRatio is the round's CPU per request of the target over its base's,
// redis-server's included for the Redis limiter's.
func (r sideRound) cpuRatio() float64 {
	return (r.cur.cpuPerReq + r.cur.redisCPUPerReq) / (r.base.cpuPerReq + r.base.redisCPUPerReq)
}

func (r sideRound) rpsRatio() float64 { return r.cur.rps / r.base.rps }

// sideBySide runs -reps rounds of every pair both of whose targets run,
// at every size.
func (b *bench) sideBySide(ctx context.Context) ([]sideRound, error) {
	byName := map[string]*target{}
	for _, t := range b.targets {
		byName[t.name] = t
	}
	var out []sideRound
	for rep := range b.o.Reps {
		for _, pair := range sidePairs {
			cur, base := byName[pair[0]], byName[pair[1]]
			if cur == nil || base == nil {
				continue
			}
			for _, t := range []*target{cur, base} {
				// A many-keys target first sees every key once (warmKeys),
				// so that its rounds run with N active keys; nothing
				// restarts it between rounds, so once is enough.
				if rep == 0 {
					if err := b.warmKeys(ctx, t); err != nil {
						return nil, err
					}
				}
				if err := b.warmUp(ctx, t, sizes(b.o)[0]); err != nil {
					return nil, err
				}
			}
			for _, size := range sizes(b.o) {
				for _, proto := range b.sideProtos() {
					r, err := b.sideRound(ctx, cur, base, size, proto)
					if (errors.Is(err, errNoWrk) || errors.Is(err, errNoH2load)) && b.o.Smoke {
						return nil, nil
					}
					if err != nil {
						return nil, err
					}
					out = append(out, r)
					b.logSideRound(rep, r)
				}
			}
		}
	}
	return out, nil
}

// sideProtos are the protocols of each pair's rounds: "" (plain HTTP/1.1)
// in plain mode, HTTP/1.1 and HTTP/2 over TLS in TLS mode.
func (b *bench) sideProtos() []string {
	if b.o.TLS {
		return tlsProtos
	}
	return []string{""}
}

// logSideRound prints one round's progress line. Errors are told apart
// (non-2xx answers, socket errors), so that a failed round says which
// target failed and how.
func (b *bench) logSideRound(rep int, r sideRound) {
	b.logf("side by side %d %-13s %-7s %.1f CPU µs/req (redis-server %.1f), %.0f rps, peak RSS %d MiB, non-2xx %d, socket errors %d; %s %.1f (%.1f), %.0f rps, peak RSS %d MiB, non-2xx %d, socket errors %d; CPU ratio %.3f, %d errors",
		rep+1, r.pair[0], sizeName(r.size)+protoSuffix(r.proto), r.cur.cpuPerReq, r.cur.redisCPUPerReq, r.cur.rps, r.cur.peakRSS>>10, r.cur.non2xx, r.cur.sockErrors,
		r.pair[1], r.base.cpuPerReq, r.base.redisCPUPerReq, r.base.rps, r.base.peakRSS>>10, r.base.non2xx, r.base.sockErrors, r.cpuRatio(), r.cur.errors+r.base.errors)
	for i, res := range []closedResult{r.cur, r.base} {
		if res.errors > 0 {
			b.logf("side by side %d %s failed %d requests; the last refusal in its log: %s", rep+1, r.pair[i], res.errors, b.lastRefusal(r.pair[i]))
		}
	}
}

// protoSuffix is ", HTTP/2" and the like after a size, "" in plain mode.
func protoSuffix(proto string) string {
	if proto == "" {
		return ""
	}
	return ", " + proto
}

// sideRound loads cur and base at once for -duration, over proto.
func (b *bench) sideRound(ctx context.Context, cur, base *target, size int, proto string) (sideRound, error) {
	r := sideRound{pair: [2]string{cur.name, base.name}, size: size, proto: proto}
	if proto == protoH2 {
		return b.sideRoundH2(ctx, r, cur, base)
	}
	// Both scripts are written before either wrk starts: two targets of
	// one kind share a script and its body file, and writing them again
	// (truncating, then writing) while the other's wrk reads them can
	// leave that wrk with an empty script or body. Two CI smoke runs saw
	// what that gives: one target of a pair answering every request of a
	// round non-2xx, fast and without a limiter call, its twin fine.
	var scripts [2]string
	for i, t := range []*target{cur, base} {
		var err error
		if scripts[i], err = b.wrkScriptFor(ctx, t, size); err != nil {
			return r, err
		}
	}
	return bothAtOnce(r, cur, base, func(i int, t *target) (closedResult, error) {
		res, err := b.wrkRunConns(ctx, t, scripts[i], size, b.o.Duration, 1, 16)
		res.errors = res.non2xx + res.sockErrors
		return res, err
	})
}

// sideRoundH2 is sideRound over HTTP/2: h2load -t1 -c16 -m10 on each,
// the one body file written before either starts.
func (b *bench) sideRoundH2(ctx context.Context, r sideRound, cur, base *target) (sideRound, error) {
	bp, ctype, err := b.h2Body(r.size)
	if err != nil {
		return r, err
	}
	return bothAtOnce(r, cur, base, func(_ int, t *target) (closedResult, error) {
		return b.h2Run(ctx, t, bp, ctype, 1, 16)
	})
}

// bothAtOnce runs load on cur (0) and base (1) at the same time and puts
// their results in r.
func bothAtOnce(r sideRound, cur, base *target, load func(i int, t *target) (closedResult, error)) (sideRound, error) {
	var wg sync.WaitGroup
	var res [2]closedResult
	var errs [2]error
	for i, t := range []*target{cur, base} {
		wg.Go(func() { res[i], errs[i] = load(i, t) })
	}
	wg.Wait()
	r.cur, r.base = res[0], res[1]
	return r, errors.Join(errs[:]...)
}

// printSideBySide prints, for each pair and size, the median over its
// rounds of the CPU ratio and the rps ratio, with their spread and each
// target's median CPU per request.
func printSideBySide(w io.Writer, o Options, rounds []sideRound) {
	base := "a second copy of this keygate (two copies of one binary: how far a round moves by itself)"
	switch {
	case o.BaseRev != "":
		base = "keygate at `" + o.BaseRev + "`"
	case o.BaseBin != "":
		base = "`" + o.BaseBin + "`"
	}
	load := "each under its own `wrk -t1 -c16`"
	if o.TLS {
		load = "over TLS 1.3, each under its own `wrk -t1 -c16` over https (HTTP/1.1) and then its own `h2load -t1 -c16 -m10` (HTTP/2)"
	}
	fmt.Fprintf(w, "\nSide by side: each keygate target and its base at the same time, %s for %s, on one upstream: both see the same machine in the same seconds. keygate-base… is %s; bare is the bare proxy, bare-redis the bare proxy with one redis_rate decision a request in a redis-server of its own; a target named …-keys holds -keys keys and its load spreads over all of them, against the same keygate with one key. CPU is the target's process tree, with its redis-server's for a Redis limiter (keygate's, bare-redis's); a ratio below 1 is the target spending less per request than its base. Peak RSS is the process tree's (redis-server's not included), the largest of any round: reset before each round, so that one size's rounds show what that size costs.\n\n", load, o.Duration, base)
	if len(rounds) == 0 {
		fmt.Fprintln(w, "No pair ran (wrk is not installed, or no keygate target ran with its base).")
		return
	}
	fmt.Fprintln(w, "| target | base | size | CPU µs/req × base: median (rounds) | rps × base: median | CPU µs/req | base's | peak RSS MiB | base's | rounds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	type key struct {
		pair  [2]string
		size  int
		proto string
	}
	var order []key
	by := map[key][]sideRound{}
	for _, r := range rounds {
		k := key{r.pair, r.size, r.proto}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	for _, k := range order {
		rs := by[k]
		ratios := make([]string, len(rs))
		for i, r := range rs {
			ratios[i] = fmt.Sprintf("%.3f", r.cpuRatio())
		}
		byCPU := func(a, b sideRound) int { return cmp.Compare(a.cpuRatio(), b.cpuRatio()) }
		lo, hi := slices.MinFunc(rs, byCPU).cpuRatio(), slices.MaxFunc(rs, byCPU).cpuRatio()
		var rss, baseRSS int64
		for _, r := range rs {
			rss, baseRSS = max(rss, r.cur.peakRSS), max(baseRSS, r.base.peakRSS)
		}
		fmt.Fprintf(w, "| %s | %s | %s%s | **%.3f** (%.3f–%.3f) | %.3f | %.0f | %.0f | %.0f | %.0f | %s |\n", k.pair[0], k.pair[1], sizeName(k.size), protoSuffix(k.proto),
			median(rs, sideRound.cpuRatio), lo, hi, median(rs, sideRound.rpsRatio),
			median(rs, func(r sideRound) float64 { return r.cur.cpuPerReq + r.cur.redisCPUPerReq }),
			median(rs, func(r sideRound) float64 { return r.base.cpuPerReq + r.base.redisCPUPerReq }),
			float64(rss)/1024, float64(baseRSS)/1024,
			strings.Join(ratios, ", "))
	}
}

// lastRefusal is the last access line of a status other than 200 in
// target name's log, for a failed round's progress line; it waits out the
// access log's buffer (1 s) first.
func (b *bench) lastRefusal(name string) string {
	time.Sleep(1100 * time.Millisecond)
	log, err := os.ReadFile(filepath.Join(b.dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(log), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; strings.Contains(l, `"msg":"request"`) && !strings.Contains(l, `"status":200,`) {
			return l
		}
	}
	return "none"
}
