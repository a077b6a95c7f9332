package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
)

// phaseResult is one phase of one rep: a closed-loop run, then an
// open-loop run, with churn throughout or without.
type phaseResult struct {
	rep    int
	churn  bool
	closed closedResult
	open   openResult
	drv    *driverReport
	// alone is the CPU the churn costs with no load, measured over
	// aloneWindow before a churn phase's loops (churn phases only).
	alone aloneResult
}

// aloneResult is each process's CPU time (µs) over a wall time with the
// churn running and no load.
type aloneResult struct {
	cpu  map[string]int64
	wall time.Duration
}

// churnProcs are the processes whose CPU the churn costs: the replicas
// that serve its admin calls, probes and change notifications, Redis, and
// the driver (the bench's own admin client).
var churnProcs = []string{"replica1", "replica2", "redis", "driver"}

// cores is the churn's CPU in cores: name's alone, or all of churnProcs'
// for "".
func (a aloneResult) cores(name string) float64 {
	if a.wall <= 0 {
		return 0
	}
	var us int64
	for _, n := range churnProcs {
		if name == "" || n == name {
			us += a.cpu[n]
		}
	}
	return float64(us) / float64(a.wall.Microseconds())
}

// measure runs the reps: baseline then churn, churn then baseline, …
func (b *bench) measure(ctx context.Context) ([]phaseResult, error) {
	var out []phaseResult
	for rep := range b.o.Reps {
		order := []bool{false, true}
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, churn := range order {
			r, err := b.phase(ctx, rep, churn)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func phaseName(churn bool) string {
	if churn {
		return "churn"
	}
	return "baseline"
}

// phase runs one closed-loop and one open-loop run against the loaded
// replicas, with the churn driver running throughout when churn is set.
func (b *bench) phase(ctx context.Context, rep int, churn bool) (phaseResult, error) {
	r := phaseResult{rep: rep, churn: churn}
	m := newCPUMeter()
	for i, rp := range b.replicas {
		m.add(fmt.Sprintf("replica%d", i+1), rp.cmd.Process.Pid)
	}
	m.add("redis", b.redis.Process.Pid)
	m.add("client", 0)
	var drv *exec.Cmd
	var drvOut bytes.Buffer
	profiling := b.o.Profile != "" && rep == b.o.Reps-1
	if churn {
		var err error
		if drv, err = b.startDriver(&drvOut); err != nil {
			return r, err
		}
		m.add("driver", drv.Process.Pid)
		// Revocations start once the first keys' lifetime is over: wait
		// for them, so that the whole run sees the full rate. Then
		// measure what the churn costs with no load.
		time.Sleep(b.o.Lifetime + aloneSettle)
		if profiling {
			if err := b.profileStart(); err != nil {
				return r, err
			}
		}
		m.begin()
		time.Sleep(b.aloneWindow())
		r.alone.cpu, r.alone.wall, _ = m.end()
		if profiling {
			if err := b.profileStop("alone"); err != nil {
				return r, err
			}
		}
		b.logf("rep %d churn alone, no load: %s; %.2f cores in all", rep+1, cores(r.alone.cpu, r.alone.wall), r.alone.cores(""))
	}
	name := phaseName(churn)
	if profiling {
		if err := b.profileStart(); err != nil {
			return r, err
		}
	}
	var err error
	if r.closed, err = b.closedLoop(ctx, m); err != nil {
		return r, err
	}
	if profiling {
		if err := b.profileStop(name); err != nil {
			return r, err
		}
	}
	c := r.closed
	b.logf("rep %d %-8s closed: %.0f rps, %s %.1f CPU µs/req, %s, steal %.1f%%; %d errors", rep+1, name, c.rps, layouts[b.o.Load].name, perReq(layouts[b.o.Load].cpu(c.cpu), c.total), cores(c.cpu, c.wall), 100*c.steal, c.errors)
	if r.open, err = b.openLoop(ctx, m); err != nil {
		return r, err
	}
	o := r.open
	b.logf("rep %d %-8s open %d/s: p50 %.2f ms, p99 %.2f ms, max %.1f ms, %s, steal %.1f%%; %d/%d errors", rep+1, name, b.o.OpenRate, ms(o.p50), ms(o.p99), ms(o.max), cores(o.cpu, o.wall), 100*o.steal, o.errors, o.sent)
	if drv != nil {
		rep, err := b.stopDriver(drv, &drvOut)
		if err != nil {
			return r, err
		}
		r.drv = rep
		b.logf("rep %d churn driver: %d issued in %.1f s, %d revoked in %.1f s (%.0f changes/s), %d admin errors, %d probes; visible p99 %s; not refused %v",
			r.rep+1, rep.Issued, rep.Seconds, rep.Revoked, rep.RevokeSeconds, changeRate(rep), rep.AdminErrors, rep.Probes, visSummary(rep.Visible), rep.NotRefused)
	}
	return r, nil
}

// aloneSettle is how long after its first keys' lifetime the churn is
// at its full rate (the first revocations are under way).
const aloneSettle = 500 * time.Millisecond

// aloneWindow is how long a churn phase measures the churn alone before
// its loops: a fifth of -duration, between 1 and 5 s.
func (b *bench) aloneWindow() time.Duration {
	return min(5*time.Second, max(time.Second, b.o.Duration/5))
}

// startDriver starts the churn driver as a process of its own; the admin
// token reaches it in its environment, never on its command line.
func (b *bench) startDriver(stdout io.Writer) (*exec.Cmd, error) {
	logf, err := os.OpenFile(filepath.Join(b.dir, "driver.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	var admins, probes []string
	for i, r := range b.replicas {
		if b.o.Admin == "both" || b.o.Admin == fmt.Sprint(i+1) {
			admins = append(admins, "http://"+r.admin)
		}
		probes = append(probes, "http://"+r.addr+"/sync")
	}
	cmd := exec.Command(b.self, "-role", "driver", "-admins", strings.Join(admins, ","), "-probes", strings.Join(probes, ","),
		"-rate", fmt.Sprint(b.o.Rate), "-lifetime", b.o.Lifetime.String(), "-probe-every", b.o.ProbeEvery.String())
	cmd.Stdout, cmd.Stderr = stdout, logf
	cmd.Env = append(os.Environ(), "CHURN_ADMIN_TOKEN="+b.token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.procs = append(b.procs, cmd)
	return cmd, nil
}

// stopDriver stops the driver, which finishes the revocations under way
// and prints its report.
func (b *bench) stopDriver(c *exec.Cmd, out *bytes.Buffer) (*driverReport, error) {
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(giveUp + 10*time.Second):
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	b.forget(c)
	if err != nil {
		return nil, fmt.Errorf("churn driver: %w; its log:\n%s", err, b.logTail("driver"))
	}
	var rep driverReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("churn driver's report: %w: %q", err, out.String())
	}
	if rep.AdminErrors > 0 {
		b.logf("churn driver: %d admin calls failed, the first: %s", rep.AdminErrors, rep.AdminError)
	}
	return &rep, nil
}

// changeRate is issues a second plus revocations a second, each over its
// own span (revocations begin a key lifetime after the issues).
func changeRate(d *driverReport) float64 {
	return float64(d.Issued)/max(d.Seconds, 1e-9) + float64(d.Revoked)/max(d.RevokeSeconds, 1e-9)
}

func perReq(us, n int64) float64 {
	if n == 0 {
		return 0
	}
	return float64(us) / float64(n)
}

// cores is each process's CPU time over the wall time, in cores.
func cores(cpu map[string]int64, wall time.Duration) string {
	var parts []string
	for _, n := range []string{"replica1", "replica2", "redis", "client", "driver"} {
		if v, ok := cpu[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", n, float64(v)/float64(wall.Microseconds())))
		}
	}
	return "cores: " + strings.Join(parts, " ")
}

func quantile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func visSummary(v [][]float64) string {
	var parts []string
	for i, xs := range v {
		parts = append(parts, fmt.Sprintf("replica %d %.0f ms", i+1, quantile(xs, 0.99)))
	}
	return strings.Join(parts, ", ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printTables prints the figures as Markdown, with the command line.
func printTables(w io.Writer, o Options, res []phaseResult) {
	pick := func(churn bool, f func(phaseResult) float64) []float64 {
		var out []float64
		for _, r := range res {
			if r.churn == churn {
				out = append(out, f(r))
			}
		}
		return out
	}
	rps := func(r phaseResult) float64 { return r.closed.rps }
	lay := layouts[o.Load]
	cpuReq := func(r phaseResult) float64 { return perReq(lay.cpu(r.closed.cpu), r.closed.total) }
	p50 := func(r phaseResult) float64 { return ms(r.open.p50) }
	p99 := func(r phaseResult) float64 { return ms(r.open.p99) }
	coresOf := func(name string, closed bool) func(phaseResult) float64 {
		return func(r phaseResult) float64 {
			if closed {
				return float64(r.closed.cpu[name]) / float64(r.closed.wall.Microseconds())
			}
			return float64(r.open.cpu[name]) / float64(r.open.wall.Microseconds())
		}
	}
	var errs [2]int64
	for _, r := range res {
		i := 0
		if r.churn {
			i = 1
		}
		errs[i] += r.closed.errors + int64(r.open.errors)
	}
	fmt.Fprintf(w, "Command: `go run ./bench/churn -keys %d -reps %d -duration %s -rate %d -open-rate %d -limiter %s -load %s -admin %s -audit %s -size %d -lifetime %s -probe-every %s`\n\n",
		o.Keys, o.Reps, o.Duration, o.Rate, o.OpenRate, o.Limiter, o.Load, o.Admin, o.Audit, o.Size, o.Lifetime, o.ProbeEvery)
	fmt.Fprintf(w, "Two replicas on one Redis keystore of %d keys (limiter: %s; audit: %s); the load goes to %s: closed loop %s, then open loop at %d/s, %s each, %d-byte file in a multipart `POST /sync`. Churn: %d admin changes/s (half issues, half revocations, each key revoked %s after both replicas accept it, through %s), each revoked key probed on both replicas every %s (after ten probes, up to five times that) until refused. Medians over %d rep(s), baseline and churn alternating.\n\n",
		o.Keys, o.Limiter, auditName(o.Audit), lay.target, lay.wrk, o.OpenRate, o.Duration, o.Size, o.Rate, o.Lifetime, adminName(o.Admin, o.Load), o.ProbeEvery, o.Reps)
	fmt.Fprint(w, "| | baseline | churn | churn − baseline |\n|---|---|---|---|\n")
	rb, rc := median(pick(false, rps)), median(pick(true, rps))
	fmt.Fprintf(w, "| closed-loop rps | %.0f | %.0f | %s |\n", rb, rc, pct(rc, rb))
	fmt.Fprintf(w, "| closed-loop rps, each rep's churn against its own baseline (median) | | | %+.1f%% |\n", 100*median(paired(res, rps, func(c, b float64) float64 { return c/b - 1 })))
	cb, cc := median(pick(false, cpuReq)), median(pick(true, cpuReq))
	fmt.Fprintf(w, "| %s CPU µs/req (admin calls and probes included) | %.1f | %.1f | %+.1f |\n", lay.name, cb, cc, cc-cb)
	pb, pc := median(pick(false, p50)), median(pick(true, p50))
	fmt.Fprintf(w, "| open-loop p50 @ %d/s | %.2f ms | %.2f ms | %+.2f ms |\n", o.OpenRate, pb, pc, pc-pb)
	qb, qc := median(pick(false, p99)), median(pick(true, p99))
	fmt.Fprintf(w, "| open-loop p99 @ %d/s | %.2f ms | %.2f ms | %+.2f ms |\n", o.OpenRate, qb, qc, qc-qb)
	fmt.Fprintf(w, "| open-loop p99, each rep's churn against its own baseline (median) | | | %+.2f ms |\n", median(paired(res, p99, func(c, b float64) float64 { return c - b })))
	for _, n := range []string{"replica1", "replica2", "redis", "driver"} {
		fmt.Fprintf(w, "| cores used by %s, closed loop | %.2f | %.2f | %+.2f |\n", n, median(pick(false, coresOf(n, true))), median(pick(true, coresOf(n, true))), median(pick(true, coresOf(n, true)))-median(pick(false, coresOf(n, true))))
	}
	fmt.Fprintf(w, "| load errors (non-2xx, socket) | %d | %d | |\n", errs[0], errs[1])
	printAlone(w, o, res)
	fmt.Fprint(w, "\nPer rep (closed-loop rps; open-loop p99 ms; the hypervisor's steal where it was 1% or more of the machine's CPU time):")
	for rep := range o.Reps {
		var parts []string
		for _, r := range res {
			if r.rep == rep {
				parts = append(parts, fmt.Sprintf("%s %.0f%s; %.2f%s", phaseName(r.churn), r.closed.rps, benchproc.StealNote(r.closed.steal), ms(r.open.p99), benchproc.StealNote(r.open.steal)))
			}
		}
		fmt.Fprintf(w, " rep %d: %s.", rep+1, strings.Join(parts, ", "))
	}
	fmt.Fprint(w, "\n\n")

	// Churn.
	var issued, revoked, adminErrs, newRefused, never int
	status := map[int]int{}
	var secs, rate float64
	nDrv := 0
	var probes int64
	var issueMs, revokeMs []float64
	vis, visSent := make([][]float64, 2), make([][]float64, 2)
	notRefused := make([]int, 2)
	for _, r := range res {
		d := r.drv
		if d == nil {
			continue
		}
		issued, revoked, adminErrs, newRefused, never = issued+d.Issued, revoked+d.Revoked, adminErrs+d.AdminErrors, newRefused+d.NewKeyRefused, never+d.NeverAccepted
		for k, v := range d.ProbeStatus {
			status[k] += v
		}
		secs += d.Seconds
		rate += changeRate(d)
		nDrv++
		probes += d.Probes
		issueMs, revokeMs = append(issueMs, d.IssueMs...), append(revokeMs, d.RevokeMs...)
		for i := range min(len(vis), len(d.Visible)) {
			vis[i] = append(vis[i], d.Visible[i]...)
			visSent[i] = append(visSent[i], d.VisibleSent[i]...)
			notRefused[i] += d.NotRefused[i]
		}
	}
	fmt.Fprintf(w, "Churn: %d keys issued and %d revoked in %.0f s of churn (%.1f changes/s, asked %d: issues a second plus revocations a second, each from its first); %d admin errors; admin call p50/p99: issue %.1f/%.1f ms, revoke %.1f/%.1f ms; %d probes (%.0f/s; %s); %d first probes of a new key refused, %d new keys never accepted.\n\n",
		issued, revoked, secs, rate/float64(max(nDrv, 1)), o.Rate, adminErrs, quantile(issueMs, 0.5), quantile(issueMs, 0.99), quantile(revokeMs, 0.5), quantile(revokeMs, 0.99), probes, float64(probes)/max(secs, 1e-9), statusList(status), newRefused, never)
	fmt.Fprint(w, "| revocation refused on | revocations | p50 | p99 | max | over 1 s | never (10 s) | refusing probe sent after: p50 | p99 | max |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i, xs := range vis {
		over := 0
		for _, x := range xs {
			if x > 1000 {
				over++
			}
		}
		ys := visSent[i]
		fmt.Fprintf(w, "| replica %d | %d | %.1f ms | %.1f ms | %.1f ms | %d | %d | %.1f ms | %.1f ms | %.1f ms |\n", i+1, len(xs), quantile(xs, 0.5), quantile(xs, 0.99), quantile(xs, 1), over, notRefused[i], quantile(ys, 0.5), quantile(ys, 0.99), quantile(ys, 1))
	}
	fmt.Fprintf(w, "\nTimes run from the revocation's admin response to the replica's first 401 (its arrival at the driver), probes %s apart (after ten, up to five times that); the replica refused the key after the last probe it accepted and before that 401 arrived. The last columns are when the refusing probe was sent: the difference is that probe's own wait in the replica%s.\n", o.ProbeEvery, lay.probe)
}

// printAlone prints the churn's own CPU with no load, the median over
// the churn phases, as cores and as a share of the machine: with a load
// that fills the machine, that much CPU goes to the churn instead.
func printAlone(w io.Writer, o Options, res []phaseResult) {
	var alone []aloneResult
	for _, r := range res {
		if r.churn && r.alone.wall > 0 {
			alone = append(alone, r.alone)
		}
	}
	if len(alone) == 0 {
		return
	}
	med := func(name string) float64 {
		xs := make([]float64, len(alone))
		for i, a := range alone {
			xs[i] = a.cores(name)
		}
		return median(xs)
	}
	var parts []string
	for _, n := range churnProcs {
		parts = append(parts, fmt.Sprintf("%s %.3f", n, med(n)))
	}
	all := med("")
	fmt.Fprintf(w, "\nThe churn alone, with no load (%s before each churn phase's loops; median over %d): %s cores; %.3f cores in all, %.1f%% of this machine's %d cores. Under a load that fills the machine, the churn takes that CPU from the load.\n",
		alone[0].wall.Round(100*time.Millisecond), len(alone), strings.Join(parts, ", "), all, 100*all/float64(o.CPUs), o.CPUs)
}

// paired is, for each rep that has both phases, diff(its churn figure,
// its baseline figure): the phases of a rep run back to back, so the
// machine's slow drift between reps (its baseline moves by a fifth here)
// cancels out of each pair.
func paired(res []phaseResult, f func(phaseResult) float64, diff func(churn, base float64) float64) []float64 {
	base, churn := map[int]float64{}, map[int]float64{}
	for _, r := range res {
		if r.churn {
			churn[r.rep] = f(r)
		} else {
			base[r.rep] = f(r)
		}
	}
	var out []float64
	for rep, c := range churn {
		if b, ok := base[rep]; ok && b != 0 {
			out = append(out, diff(c, b))
		}
	}
	return out
}

// pct is a against b as a signed percentage.
func pct(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.1f%%", 100*(a-b)/b)
}

// statusList is "401: n, 415: m" in status order; 0 is "no answer".
func statusList(m map[int]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := fmt.Sprint(k)
		if k == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, m[k]))
	}
	return "answers " + strings.Join(parts, ", ")
}

// layout describes a -load value in the tables.
type layout struct {
	target string   // whom the load goes to
	wrk    string   // the closed loop's clients
	name   string   // the loaded replicas, as a row names them
	procs  []string // their process names, whose CPU the load's requests cost
	probe  string   // what the visibility table's note adds
}

var layouts = map[string]layout{
	"both": {"both replicas evenly", "`wrk -t1 -c16` on each", "replicas 1+2", []string{"replica1", "replica2"}, ""},
	"1":    {"replica 1", "`wrk -t2 -c32`", "replica 1", []string{"replica1"}, " (replica 1 is the loaded one)"},
}

// cpu is the CPU time of the loaded replicas.
func (l layout) cpu(byProc map[string]int64) int64 {
	var t int64
	for _, n := range l.procs {
		t += byProc[n]
	}
	return t
}

func auditName(a string) string {
	if a == "none" {
		return "the Redis stream alone, `audit.file: none`"
	}
	return "the Redis stream and a file, fsync'ed per event"
}

func adminName(a, load string) string {
	if a == "both" {
		return "each replica's admin API in turn"
	}
	role := map[bool]string{true: "the loaded one", false: "not the loaded one"}[a == "1"]
	if load == "both" {
		role = "both are loaded"
	}
	return fmt.Sprintf("replica %s's admin API (%s)", a, role)
}
