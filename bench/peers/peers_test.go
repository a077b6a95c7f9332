package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
)

// TestMain lets the test binary play the bench's roles (upstream, bare
// proxy) when the bench starts it as a child process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-role" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSmoke runs the bench in smoke mode: one short rep with tiny bodies,
// skipping peers that are not installed. It proves the bench works end to
// end (every target answers the bench request with 200, the tables come
// out); it asserts nothing about speed.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	out, errb := runLogged(t, Options{Smoke: true, Refusals: true, SideBySide: true}, 5*time.Minute)
	needTools(t, "wrk", "nginx", "nginx-lua", "haproxy", "caddy", "traefik")
	wants := []string{"| direct |", "| bare |", "| bare-redis |", "| traefik-redis |", "| keygate |", "| keygate-redis |", "| keygate-bearer |", "| keygate-base |", "Open loop", "Large uploads", "Side by side:",
		"| nginx |", "| nginx-lua |", "| haproxy |", "| caddy |",
		"Refusals: `wrk -t2 -c32`", "| keygate-redis | keygate-base-redis | 256 B | **", "| keygate-bearer | keygate-base-bearer | 256 B | **",
		"| keygate | bare | 256 B | **", "| keygate-redis | bare | 256 B | **", "| keygate-redis | bare-redis | 256 B | **", "| bare-redis | bare | 256 B | **", "| keygate-redis | traefik-redis | 256 B | **"}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Every progress line ends with its error count; all must be zero.
	noFailedRequests(t, errb)
}

// The large-uploads table is printed only when large uploads ran: with
// -large-n 0 or -large-rounds 0 a reader sees no table of zeros; nor is
// the upstream's own rps, without the direct target.
func TestPrintTablesShowWhatRan(t *testing.T) {
	res := func(large, direct bool) *results {
		r := &results{
			order:     []string{"bare", "keygate"},
			closed:    map[string]map[int][]closedResult{},
			open:      map[string]map[int][]openResult{},
			large:     map[string]map[bool][]largeResult{},
			withRedis: map[string]bool{},
		}
		if direct {
			r.order = append([]string{"direct"}, r.order...)
		}
		for i, name := range r.order {
			r.closed[name] = map[int][]closedResult{256: {{rps: float64(1000 * (i + 1)), cpuPerReq: 80}}, 102400: {{rps: 500, cpuPerReq: 150}}}
			r.open[name] = map[int][]openResult{256: {{p50: time.Millisecond, p99: 3 * time.Millisecond, sent: 10}}, 102400: {{p50: time.Millisecond, p99: 4 * time.Millisecond, sent: 10}}}
			r.large[name] = map[bool][]largeResult{}
			if large {
				r.large[name][true] = []largeResult{{elapsed: 2 * time.Second, peakRSS: 30 << 10}}
				r.large[name][false] = []largeResult{{elapsed: 3 * time.Second, peakRSS: 30 << 10}}
			}
		}
		return r
	}
	for _, c := range []struct {
		name      string
		o         Options
		wantLarge bool
		direct    bool
	}{
		{"large uploads ran", Options{LargeN: 8, LargeMiB: 90, LargeRounds: 3}, true, false},
		{"-large-n 0", Options{LargeN: 0, LargeMiB: 90, LargeRounds: 3}, false, false},
		{"-large-rounds 0", Options{LargeN: 8, LargeMiB: 90, LargeRounds: 0}, false, false},
		{"with the direct target", Options{LargeN: 0, LargeMiB: 90, LargeRounds: 3}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := len(c.o.largeModes()) > 0; got != c.wantLarge {
				t.Errorf("largeModes %v, want modes: %v", c.o.largeModes(), c.wantLarge)
			}
			var out bytes.Buffer
			printTables(&out, c.o, res(c.wantLarge, c.direct))
			s := out.String()
			wantRow, wantDirect := "| keygate | – | 2.00 | 80 |", ""
			if c.direct {
				wantRow, wantDirect = "| keygate | 3.00 | 1.50 | 80 |", "Direct upstream, absolute: 256 B 1000 rps; 100 KiB 500 rps;"
			}
			if !strings.Contains(s, wantRow) {
				t.Errorf("closed-loop table lacks %q:\n%s", wantRow, s)
			}
			// Without a direct target there is no upstream rps to give.
			if got := strings.Contains(s, "Direct upstream"); got != c.direct || !strings.Contains(s, wantDirect) {
				t.Errorf("direct-upstream line %v, want %v (%q):\n%s", got, c.direct, wantDirect, s)
			}
			if got := strings.Contains(s, "Large uploads"); got != c.wantLarge {
				t.Errorf("large-uploads table printed: %v, want %v:\n%s", got, c.wantLarge, s)
			}
		})
	}
}

// The refusals table shows each target that was flooded with a made-up
// key, beside its accepted rps, and counts an admitted request or a
// socket error as an error; without -refusals there is no table.
func TestPrintRefusals(t *testing.T) {
	o := Options{Reps: 1, Duration: time.Second, Smoke: true}
	r := &results{
		order:        []string{"bare", "keygate", "nginx-lua"},
		closed:       map[string]map[int][]closedResult{},
		refused:      map[string][]closedResult{},
		refusedAfter: map[string]int{"keygate": 429, "nginx-lua": 401},
	}
	for _, name := range r.order {
		r.closed[name] = map[int][]closedResult{sizes(o)[0]: {{rps: 1000}}}
	}
	var none bytes.Buffer
	printRefusals(&none, o, r)
	if none.Len() != 0 {
		t.Fatalf("a table without refusals:\n%s", none.String())
	}
	r.refused["keygate"] = []closedResult{{rps: 3000, cpuPerReq: 30, errors: 0}}
	r.refused["nginx-lua"] = []closedResult{{rps: 8000, cpuPerReq: 13, errors: 2}}
	var out bytes.Buffer
	printRefusals(&out, o, r)
	for _, want := range []string{"| keygate | 3000 | 3.00 | 30 | 0 | 429 | 0 |", "| nginx-lua | 8000 | 8.00 | 13 | 0 | 401 | 2 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("refusals table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "| bare |") {
		t.Errorf("a target that checks no keys has a row:\n%s", out.String())
	}
}

// A process's memory as the bench reads it: RSS and PSS both found, and
// PSS, which splits shared pages, no more than RSS.
func TestProcessMemory(t *testing.T) {
	rss, pss := memKiB(os.Getpid(), "VmRSS"), pssKiB(os.Getpid())
	if rss <= 0 || pss <= 0 || pss > rss {
		t.Errorf("VmRSS %d KiB, PSS %d KiB: want both found and PSS ≤ RSS", rss, pss)
	}
	if n := memKiB(os.Getpid(), "NoSuchField"); n != 0 {
		t.Errorf("a field /proc does not have read as %d KiB", n)
	}
}

// TestOnlySideBySide: -only-side-by-side runs the pairs' rounds and
// prints their table alone, none of the runs one after another; only
// the pairs both of whose targets were chosen run (keygate-redis and
// bare-redis were not).
func TestOnlySideBySide(t *testing.T) {
	out, errb := runSideBySide(t, Options{Targets: "bare,keygate"}, 2*time.Minute)
	for _, want := range []string{"| keygate | keygate-base | 256 B | **", "| keygate | bare | 256 B | **"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, unwanted := range []string{"\n| bare |", "Open loop", "closed:"} {
		if strings.Contains(out+errb, unwanted) {
			t.Errorf("output has %q, from a run one after another", unwanted)
		}
	}
	for _, unwanted := range []string{"| keygate-redis |", "| bare-redis |", "| keygate-redis | bare-redis |"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("output has %q, a pair of targets not chosen", unwanted)
		}
	}
}

// runSideBySide runs the bench with -smoke -only-side-by-side and o's
// other options within timeout, logs and returns its stdout and stderr,
// and fails t if it fails. It skips where it cannot run: in -short mode
// and without wrk.
func runSideBySide(t *testing.T, o Options, timeout time.Duration) (out, errb string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	needTools(t, "wrk")
	o.Smoke, o.OnlySideBySide = true, true
	return runLogged(t, o, timeout)
}

// needTools fails t, naming `make deps`, when a program the test runs
// is missing: the bench's smoke mode passes over a peer that is not
// installed, and a test that did the same would pass having checked
// nothing. scripts/deps.txt lists them all; "nginx-lua" is nginx's Lua
// module.
func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		ok := benchproc.LookPath(n) != ""
		switch n {
		case "nginx-lua":
			ok = luaInstalled()
		case "traefik":
			ok = traefikBin() != ""
		}
		if !ok {
			t.Fatalf("%s is not installed: run `make deps` (scripts/deps.txt lists it)", n)
		}
	}
}

// runLogged runs the bench with o within timeout, logs its stderr and
// stdout, returns them, and fails t if it fails.
func runLogged(t *testing.T, o Options, timeout time.Duration) (out, errb string) {
	t.Helper()
	var ob, eb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := Run(ctx, o, &ob, &eb)
	t.Log(eb.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + ob.String())
	return ob.String(), eb.String()
}

// noFailedRequests fails t for each progress line in errb whose error
// count is not zero: every line that reports errors ends with " 0
// errors" or, for an open loop, reads ", 0/…".
func noFailedRequests(t *testing.T, errb string) {
	t.Helper()
	for _, line := range strings.Split(errb, "\n") {
		if strings.Contains(line, "errors") && !strings.HasSuffix(line, " 0 errors") && !strings.Contains(line, ", 0/") {
			t.Errorf("a target failed requests: %s", line)
		}
	}
}

// TestOnlySideBySideBaseRev: -keygate-base-rev builds the base from a
// git revision and compares this keygate with it, the table naming the
// revision and its commit; with -keygate-base as well it is refused.
func TestOnlySideBySideBaseRev(t *testing.T) {
	if err := Run(context.Background(), Options{BaseRev: "HEAD", BaseBin: "/bin/true", OnlySideBySide: true}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Errorf("both bases: %v, want refused", err)
	}
	if exec.Command("git", "rev-parse", "--verify", "HEAD").Run() != nil {
		t.Skip("not a git repository")
	}
	out, errb := runSideBySide(t, Options{BaseRev: "HEAD", Targets: "keygate"}, 3*time.Minute)
	for _, want := range []string{"keygate-base: built at HEAD (", "keygate-base… is keygate at `HEAD (", "| keygate | keygate-base | 256 B | **"} {
		if !strings.Contains(errb+out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestPrintSideBySide: each pair's row has the median of its rounds'
// ratios, their range and every round's, in the order the pairs ran;
// without rounds the table says why there is none.
func TestPrintSideBySide(t *testing.T) {
	round := func(pair [2]string, cur, base, rps float64) sideRound {
		return sideRound{pair: pair, size: 256, cur: closedResult{cpuPerReq: cur, rps: rps, peakRSS: 30 << 10}, base: closedResult{cpuPerReq: base, rps: 1000, peakRSS: 20 << 10}}
	}
	kg, kgr := [2]string{"keygate", "keygate-base"}, [2]string{"keygate-redis", "keygate-base-redis"}
	redis := round(kgr, 90, 100, 1000)
	redis.cur.redisCPUPerReq, redis.base.redisCPUPerReq = 10, 20 // (90+10)/(100+20)
	redis.cur.peakRSS = 45 << 10                                 // the largest round's
	var out bytes.Buffer
	printSideBySide(&out, Options{Duration: 8 * time.Second, BaseBin: "/tmp/kg-old"},
		[]sideRound{round(kg, 99, 100, 1010), redis, round(kg, 90, 100, 1100), round(kg, 120, 100, 900), round([2]string{"keygate", "bare"}, 110, 100, 950)})
	for _, want := range []string{
		"under its own `wrk -t1 -c16` for 8s",
		"keygate-base… is `/tmp/kg-old`",
		"| keygate | keygate-base | 256 B | **0.990** (0.900–1.200) | 1.010 | 99 | 100 | 30 | 20 | 0.990, 0.900, 1.200 |",
		"| keygate-redis | keygate-base-redis | 256 B | **0.833** (0.833–0.833) | 1.000 | 100 | 120 | 45 | 20 | 0.833 |",
		"| keygate | bare | 256 B | **1.100** (1.100–1.100) | 0.950 | 110 | 100 | 30 | 20 | 1.100 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Index(out.String(), "| keygate | keygate-base |") > strings.Index(out.String(), "| keygate-redis |") {
		t.Errorf("pairs out of order:\n%s", out.String())
	}
	out.Reset()
	printSideBySide(&out, Options{Duration: time.Second}, nil)
	for _, want := range []string{"a second copy of this keygate", "No pair ran"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestReadmeFlags: every BENCH_PEERS_FLAGS docs/performance.md (the
// method and the commands that reproduce its tables) shows is a set of
// flags this bench takes, with values of their kinds.
func TestReadmeFlags(t *testing.T) {
	readme, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	all := regexp.MustCompile("BENCH_PEERS_FLAGS=(?:\"([^\"]*)\"|([^\\s`\"]+))").FindAllSubmatch(readme, -1)
	if len(all) < 5 {
		t.Fatalf("found %d BENCH_PEERS_FLAGS in docs/performance.md", len(all))
	}
	for _, m := range all {
		flags := string(m[1]) + string(m[2])
		var out bytes.Buffer
		// A role no one plays: Main parses every flag, then stops at it.
		Main(append(strings.Fields(flags), "-role", "readme-check"), &out, &out)
		if !strings.Contains(out.String(), `unknown role "readme-check"`) {
			t.Errorf("docs/performance.md's BENCH_PEERS_FLAGS=%q: %s", flags, out.String())
		}
	}
}
