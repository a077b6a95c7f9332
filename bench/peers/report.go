package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
)

// results are every rep's figures, by target name.
type results struct {
	order  []string
	closed map[string]map[int][]closedResult
	open   map[string]map[int][]openResult
	large  map[string]map[bool][]largeResult
	// refused are the -refusals loops, by target (refusalLoop), and
	// refusedAfter the status of a request right after the last one.
	refused      map[string][]closedResult
	refusedAfter map[string]int
	// withRedis are the targets with a redis-server of their own.
	withRedis map[string]bool
	noWrk     bool
}

// measure runs every rep, in alternating target order.
func (b *bench) measure(ctx context.Context) (*results, error) {
	res := &results{closed: map[string]map[int][]closedResult{}, open: map[string]map[int][]openResult{}, large: map[string]map[bool][]largeResult{}, refused: map[string][]closedResult{}, refusedAfter: map[string]int{}, withRedis: map[string]bool{}}
	for _, t := range b.targets {
		res.order = append(res.order, t.name)
		res.withRedis[t.name] = t.redis != nil
		res.closed[t.name], res.open[t.name], res.large[t.name] = map[int][]closedResult{}, map[int][]openResult{}, map[bool][]largeResult{}
	}
	for rep := range b.o.Reps {
		ts := slices.Clone(b.targets)
		if rep%2 == 1 {
			slices.Reverse(ts)
		}
		for _, t := range ts {
			if err := b.warmKeys(ctx, t); err != nil {
				return nil, err
			}
			if err := b.warmUp(ctx, t, sizes(b.o)[0]); err != nil {
				return nil, err
			}
			for _, size := range sizes(b.o) {
				c, err := b.closedLoop(ctx, t, size)
				switch {
				case errors.Is(err, errNoWrk) && b.o.Smoke:
					res.noWrk = true
				case err != nil:
					return nil, err
				default:
					res.closed[t.name][size] = append(res.closed[t.name][size], c)
				}
				b.logf("rep %d %-13s %-7s closed: %.0f rps, %.1f CPU µs/req (redis-server %.1f), steal %.1f%%, %d errors", rep+1, t.name, sizeName(size), c.rps, c.cpuPerReq, c.redisCPUPerReq, 100*c.steal, c.errors)
				o, err := b.openLoop(ctx, t, size, rate(b.o, size))
				if err != nil {
					return nil, err
				}
				res.open[t.name][size] = append(res.open[t.name][size], o)
				b.logf("rep %d %-13s %-7s open %d rps: p50 %s p99 %s, %d/%d errors", rep+1, t.name, sizeName(size), rate(b.o, size), ms(o.p50), ms(o.p99), o.errors, o.sent)
			}
			if err := b.afterKeysLoad(ctx, t); err != nil {
				return nil, err
			}
			if b.o.Refusals && checksKeys(t.name) {
				c, after, err := b.refusalLoop(ctx, t)
				switch {
				case errors.Is(err, errNoWrk) && b.o.Smoke:
				case err != nil:
					return nil, err
				default:
					res.refused[t.name] = append(res.refused[t.name], c)
					res.refusedAfter[t.name] = after
				}
				b.logf("rep %d %-13s refusals: %.0f a second, %.1f CPU µs each (redis-server %.1f), steal %.1f%%, then %d, %d errors", rep+1, t.name, c.rps, c.cpuPerReq, c.redisCPUPerReq, 100*c.steal, after, c.errors)
			}
			for _, first := range b.o.largeModes() {
				// Peak RSS is that of a fresh process: not what the
				// open loop's backlog left in the heap.
				if err := b.restart(t); err != nil {
					return nil, err
				}
				// One round of uploads lasts about half a second here:
				// several, for a median that one slow round cannot move.
				for range b.o.LargeRounds {
					l, err := b.large(ctx, t, first)
					if err != nil {
						return nil, err
					}
					res.large[t.name][first] = append(res.large[t.name][first], l)
					b.logf("rep %d %-13s large (context first: %v): %s, peak RSS %d MiB, largest spool file %d MiB, %d errors", rep+1, t.name, first, l.elapsed.Round(time.Millisecond), l.peakRSS>>10, l.spoolPeak>>20, l.errors)
				}
			}
		}
	}
	return res, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func median[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// printTables prints the medians as Markdown.
func printTables(w io.Writer, o Options, r *results) {
	sz := sizes(o)
	rps := func(name string, size int) float64 {
		return median(r.closed[name][size], func(c closedResult) float64 { return c.rps })
	}
	cpu := func(name string, size int) float64 {
		return median(r.closed[name][size], func(c closedResult) float64 { return c.cpuPerReq })
	}
	errs := func(name string) (n int64) {
		for _, s := range sz {
			for _, c := range r.closed[name][s] {
				n += c.errors
			}
			for _, c := range r.open[name][s] {
				n += int64(c.errors)
			}
		}
		for _, ls := range r.large[name] {
			for _, l := range ls {
				n += int64(l.errors)
			}
		}
		return n
	}
	fmt.Fprintf(w, "Closed loop: `wrk -t2 -c32`, %s per run, median of %d rep(s) in alternating order%s; rps as a ratio to the upstream served directly and to the bare `httputil.ReverseProxy`; CPU µs/req of the proxy's process tree.\n\n", o.Duration, o.Reps, warmNote(o))
	if r.noWrk {
		fmt.Fprint(w, "(wrk is not installed: closed loop skipped)\n\n")
	}
	sizedHead(w, sz, func(s int) []string { return []string{sizeName(s) + " × direct", "× bare", "CPU µs/req"} }, "errors")
	for _, name := range r.order {
		fmt.Fprintf(w, "| %s |", name)
		for _, s := range sz {
			fmt.Fprintf(w, " %s | %s | %.0f |", ratio(rps(name, s), rps("direct", s)), ratio(rps(name, s), rps("bare", s)), cpu(name, s))
		}
		fmt.Fprintf(w, " %d |\n", errs(name))
	}
	anyRedis := false
	for _, name := range r.order {
		anyRedis = anyRedis || r.withRedis[name]
	}
	if anyRedis {
		fmt.Fprint(w, "\nThe Redis-limiter targets' redis-server (keygate's; bare-redis's: the bare proxy with one redis_rate decision a request; traefik-redis's: Traefik's rateLimit middleware with its Redis store) shares the two cores: its own CPU µs/req in the same runs, beside the target's.\n\n")
		sizedHead(w, sz, func(s int) []string { return []string{sizeName(s) + " target", "redis-server", "both"} })
		for _, name := range r.order {
			if !r.withRedis[name] {
				continue
			}
			fmt.Fprintf(w, "| %s |", name)
			for _, s := range sz {
				rc := median(r.closed[name][s], func(c closedResult) float64 { return c.redisCPUPerReq })
				fmt.Fprintf(w, " %.0f | %.0f | %.0f |", cpu(name, s), rc, cpu(name, s)+rc)
			}
			fmt.Fprint(w, "\n")
		}
	}
	// The upstream's own rps, only where it ran as a target.
	if len(r.closed["direct"]) > 0 {
		fmt.Fprint(w, "\nDirect upstream, absolute:")
		for _, s := range sz {
			fmt.Fprintf(w, " %s %.0f rps;", sizeName(s), rps("direct", s))
		}
		fmt.Fprint(w, "\n")
	}
	fmt.Fprint(w, "\n")
	if o.Reps > 1 {
		repSpread(w, "Closed-loop rps of every rep", r.order, sz, func(name string, size int) []closedResult { return r.closed[name][size] })
	}

	p := func(name string, size int, f func(openResult) time.Duration) float64 {
		return median(r.open[name][size], func(o openResult) float64 { return float64(f(o)) / float64(time.Millisecond) })
	}
	fmt.Fprint(w, "Open loop: constant arrival rate, latency from the intended send time, ms (median over reps).\n\n")
	sizedHead(w, sz, func(s int) []string {
		return []string{fmt.Sprintf("%s @ %d/s p50", sizeName(s), rate(o, s)), "p99", "p99 − bare"}
	})
	p50 := func(o openResult) time.Duration { return o.p50 }
	p99 := func(o openResult) time.Duration { return o.p99 }
	for _, name := range r.order {
		fmt.Fprintf(w, "| %s |", name)
		for _, s := range sz {
			d := "–"
			if len(r.open["bare"][s]) > 0 {
				d = fmt.Sprintf("%+.2f", p(name, s, p99)-p("bare", s, p99))
			}
			fmt.Fprintf(w, " %.2f | %.2f | %s |", p(name, s, p50), p(name, s, p99), d)
		}
		fmt.Fprint(w, "\n")
	}

	printRefusals(w, o, r)

	if !o.runsLarge() {
		return
	}
	fmt.Fprintf(w, "\nLarge uploads: %d × %d MiB at once, %d round(s) after a fresh start in each rep; time until all are answered, median of every round (ratio to the bare proxy); peak RSS of the proxy's process tree and largest spool file (keygate), the largest of every round.\n\n", o.LargeN, o.LargeMiB, o.LargeRounds)
	fmt.Fprint(w, "| target | context first | × bare | context after | × bare | peak RSS MiB | largest spool file MiB |\n|---|---|---|---|---|---|---|\n")
	el := func(name string, first bool) float64 {
		return median(r.large[name][first], func(l largeResult) float64 { return l.elapsed.Seconds() })
	}
	for _, name := range r.order {
		rss, spool := 0.0, 0.0
		for _, ls := range r.large[name] {
			for _, l := range ls {
				rss, spool = max(rss, float64(l.peakRSS)/1024), max(spool, float64(l.spoolPeak)/(1<<20))
			}
		}
		fmt.Fprintf(w, "| %s | %.2f s | %s | %.2f s | %s | %.0f | %.0f |\n", name, el(name, true), ratio(el(name, true), el("bare", true)), el(name, false), ratio(el(name, false), el("bare", false)), rss, spool)
	}
}

// warmNote says how targets were warmed, for the tables' headings.
func warmNote(o Options) string {
	if o.Warmup <= 0 {
		return ", no warm-up"
	}
	return fmt.Sprintf(", each target warmed by an unmeasured %s run after every start", o.Warmup)
}

// repSpread prints the closed-loop rps of every rep, in rep order, by
// target and size: a median hides how far the reps were apart, and on a
// shared machine that is what says how much a ratio can be trusted.
func repSpread(w io.Writer, heading string, order []string, sz []int, of func(name string, size int) []closedResult) {
	fmt.Fprintf(w, "%s, in rep order (the spread behind each median), each with the share of the machine's CPU time the hypervisor gave to other guests during it (steal, /proc/stat) where it was 1%% or more:\n\n", heading)
	sizedHead(w, sz, func(s int) []string { return []string{sizeName(s)} })
	for _, name := range order {
		fmt.Fprintf(w, "| %s |", name)
		for _, s := range sz {
			reps := make([]string, 0, len(of(name, s)))
			for _, c := range of(name, s) {
				reps = append(reps, fmt.Sprintf("%.0f", c.rps)+benchproc.StealNote(c.steal))
			}
			fmt.Fprintf(w, " %s |", strings.Join(reps, ", "))
		}
		fmt.Fprint(w, "\n")
	}
	fmt.Fprint(w, "\n")
}

// sizedHead prints a Markdown table's heading row and rule: the target
// column, cols of each size in turn, then the tail columns.
func sizedHead(w io.Writer, sz []int, cols func(size int) []string, tail ...string) {
	fmt.Fprint(w, "| target |")
	n := len(tail)
	for _, s := range sz {
		for _, c := range cols(s) {
			fmt.Fprintf(w, " %s |", c)
			n++
		}
	}
	for _, c := range tail {
		fmt.Fprintf(w, " %s |", c)
	}
	fmt.Fprint(w, "\n|---|"+strings.Repeat("---|", n)+"\n")
}

// printRefusals prints the -refusals table: each target that checks keys
// under a flood of one made-up key.
func printRefusals(w io.Writer, o Options, r *results) {
	if len(r.refused) == 0 {
		return
	}
	fmt.Fprintf(w, "\nRefusals: `wrk -t2 -c32`, %s per run, every request from one address with the same made-up key of the right shape and a %s multipart body, against each target that checks keys; refusals a second and as a ratio to the same target's accepted requests of that size; CPU µs per refusal (the target's, and its redis-server's); the status of one more such request right after the flood (keygate answers an address past its failure limit 429 before it looks at a key); errors are admitted requests and socket errors (median of %d rep(s); the target admits the bench key again before the bench goes on).\n\n", o.Duration, sizeName(sizes(o)[0]), o.Reps)
	fmt.Fprint(w, "| target | refusals/s | × accepted rps | CPU µs each | redis-server | then | errors |\n|---|---|---|---|---|---|---|\n")
	for _, name := range r.order {
		cs := r.refused[name]
		if len(cs) == 0 {
			continue
		}
		rps := median(cs, func(c closedResult) float64 { return c.rps })
		accepted := median(r.closed[name][sizes(o)[0]], func(c closedResult) float64 { return c.rps })
		var errs int64
		for _, c := range cs {
			errs += c.errors
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %.0f | %.0f | %d | %d |\n", name, rps, ratio(rps, accepted),
			median(cs, func(c closedResult) float64 { return c.cpuPerReq }), median(cs, func(c closedResult) float64 { return c.redisCPUPerReq }), r.refusedAfter[name], errs)
	}
}
