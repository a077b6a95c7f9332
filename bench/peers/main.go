// Command peers is `make bench-peers`: it measures keygate against a plain
// upstream served directly, a bare httputil.ReverseProxy, nginx, HAProxy,
// Caddy and Traefik (with its Redis rate limiter), all on loopback with the same multipart /sync request, and
// prints a Markdown table of ratios. `make profile` runs it with -profile
// to write a CPU profile of keygate under load.
//
// The same binary also plays the plain upstream and the bare proxy (-role;
// with -redis, the bare proxy with a redis_rate limit: bareredis.go), so
// that they run as processes of their own whose CPU time is measured from
// /proc.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keygate/keygate/cli"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs the bench, or one role of it, and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	role := fs.String("role", "", "internal: upstream | bare | keygate")
	listen := fs.String("listen", "127.0.0.1:0", "internal: the role's listen address")
	up := fs.String("upstream", "", "internal: the bare proxy's upstream host:port")
	idlePool := fs.Int("pool", pool, "internal: the bare proxy's idle pool per host")
	cpuProfile := fs.String("cpuprofile", "", "internal: keygate role writes a CPU profile here on SIGTERM")
	certFile := fs.String("cert", "", "internal: the upstream or bare role serves TLS 1.3 with this PEM certificate")
	keyFile := fs.String("key", "", "internal: the PEM key of -cert")
	redisAddr := fs.String("redis", "", "internal: the bare role decides each request's rate limit in the Redis at this host:port with redis_rate (target bare-redis)")
	fs.IntVar(&o.Reps, "reps", 3, "repetitions, in alternating target order (the median of three is not moved by one slow rep)")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "length of each closed-loop and open-loop run")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "a closed-loop run, not measured, that each target gets after every start before its measured loads (0: none)")
	fs.BoolVar(&o.Smoke, "smoke", os.Getenv("BENCH_SMOKE") == "1", "one short rep with tiny sizes, skipping peers that are not installed (proves the bench works; measures nothing)")
	fs.StringVar(&o.Targets, "targets", "", "comma-separated targets (default all): direct,bare,bare-redis (the bare proxy with one redis_rate decision a request, keyed by x-api-key, in a redis-server of its own: bareredis.go),traefik-redis (Traefik v3 with its Redis-backed rateLimit middleware, keyed by x-api-key, in a redis-server of its own: traefik.go),nginx,nginx-lua (nginx checking the key in Lua: configs/nginx-lua.tmpl),haproxy,caddy,caddy-log,keygate,keygate-redis,keygate-redis-lease,keygate-bearer (a bearer token of the key, from keygate's token endpoint),keygate-base,keygate-base-redis,keygate-base-bearer; with -keys also keygate-keys,keygate-redis-keys,nginx-lua-keys")
	fs.StringVar(&o.Profile, "profile", "", "only profile keygate (local limiter) under wrk load and write the CPU profile to this file")
	fs.BoolVar(&o.ProfileRedis, "profile-redis", false, "with -profile: keygate with the Redis limiter")
	fs.BoolVar(&o.ProfileH2, "profile-h2", false, "with -profile -tls: load keygate with h2load over HTTP/2 instead of wrk")
	fs.BoolVar(&o.ProfileLarge, "profile-large", false, "with -profile: profile the large uploads (context first) instead of the wrk load")
	fs.IntVar(&o.LargeMiB, "large-mib", 90, "size of each large upload, MiB")
	fs.IntVar(&o.LargeN, "large-n", 8, "concurrent large uploads (0: none, and no large-uploads table)")
	fs.IntVar(&o.LargeRounds, "large-rounds", 3, "large uploads per rep and mode, one after another in one process: time is the median of all, peak RSS and spool the largest (0: none)")
	fs.StringVar(&o.Sizes, "sizes", "", "comma-separated body sizes in bytes (default 256,102400,1048576,20971520)")
	fs.StringVar(&o.BaseBin, "keygate-base", "", "another keygate binary (say, the last release) to run beside this one as targets keygate-base (local limiter) and keygate-base-redis")
	fs.StringVar(&o.BaseRev, "keygate-base-rev", "", "instead of -keygate-base: a git revision of keygate's repository (origin/main, a tag, HEAD~1…) to build the base from (its tree from git archive; the work tree is left alone)")
	fs.BoolVar(&o.SideBySide, "side-by-side", false, "also load each keygate target and its base (keygate-base, keygate-base-redis, keygate-base-bearer; without -keygate-base a second copy of this keygate; with bare or caddy among the targets, keygate against them too, and with bare-redis keygate-redis against it) at the same time, each under its own `wrk -t1 -c16` (with -tls: over https, then under its own `h2load -t1 -c16 -m10`), -reps rounds of -duration a size, and print each round's ratios and their medians: both see the same machine, so the drift between runs cancels out")
	fs.BoolVar(&o.OnlySideBySide, "only-side-by-side", false, "-side-by-side without the runs one after another and their tables: only the rounds of each pair (the quick check that a build is no slower than -keygate-base)")
	fs.StringVar(&o.KeygateBin, "keygate", "", "keygate binary (default: built from ./cmd/keygate)")
	fs.BoolVar(&o.TLS, "tls", false, "every target terminates TLS 1.3 (one ECDSA P-256 certificate); loads over HTTP/1.1 (wrk) and HTTP/2 (h2load); no large uploads. With -profile: keygate over TLS under wrk")
	fs.BoolVar(&o.Refusals, "refusals", false, "plain mode: also load every target that checks keys (keygate's, nginx-lua) with a made-up key and the first size's body, for -duration each rep: refusals a second and CPU µs per refusal")
	out := fs.String("out", "", "also write the run's tables to bench/results/<YYYY-MM-DD>-<commit>-<TOPIC>.md (UTC date, HEAD's hash; a topic is lower-case words joined by hyphens), headed by the command and the build")
	fs.IntVar(&o.Keys, "keys", 0, "also targets keygate-keys, keygate-redis-keys and nginx-lua-keys: N keys in the keystore (nginx-lua-keys: in its Lua table), the load spread evenly over them, against keygate, keygate-redis and nginx-lua with one key (keys.go); plain mode only; with -profile (also over -tls), profile keygate with N keys")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch *role {
	case "":
		if *out != "" {
			// Checked before the run, not after it.
			if _, err := resultsPath("", time.Now(), strings.Repeat("0", 7), *out); err != nil {
				fmt.Fprintln(stderr, "bench-peers:", err)
				return 2
			}
		}
		var tables bytes.Buffer
		if err := Run(context.Background(), o, io.MultiWriter(stdout, &tables), stderr); err != nil {
			fmt.Fprintln(stderr, "bench-peers:", err)
			return 1
		}
		if *out != "" {
			if err := writeResults(*out, args, tables.Bytes(), stderr); err != nil {
				fmt.Fprintln(stderr, "bench-peers:", err)
				return 1
			}
		}
		return 0
	case "upstream", "bare":
		h := upstreamHandler()
		if *role == "bare" {
			h = bareProxy(*up, *idlePool)
			if *redisAddr != "" {
				h = bareRedis(h, *redisAddr, bareRedisLimit)
			}
		}
		if *certFile != "" {
			return serveRoleTLS(*listen, *certFile, *keyFile, stderr, h)
		}
		return serveRole(*listen, stderr, h)
	case "keygate":
		return keygateRole(fs.Args(), *cpuProfile, stdout, stderr)
	}
	fmt.Fprintf(stderr, "unknown role %q\n", *role)
	return 2
}

// upstreamHandler is the plain upstream: it consumes the body and answers
// a small 200.
func upstreamHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"StateText":"OK"}`)
	})
}

// bareProxy is the baseline: the best bare httputil.ReverseProxy a few
// lines make. It lends its 32 KiB copy buffers from a pool (as keygate
// does), keeps keygate's idle pool per upstream host, and does not ask the
// upstream for gzip (a proxy that would only pass it through).
func bareProxy(upstream string, pool int) http.Handler {
	u := &url.URL{Scheme: "http", Host: upstream}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = pool
	tr.MaxIdleConnsPerHost = pool
	tr.DisableCompression = true
	return &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  tr,
		BufferPool: bufPool{},
	}
}

// bufPool is httputil.BufferPool over a sync.Pool of 32 KiB buffers.
type bufPool struct{}

var bufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufPool) Get() []byte  { return *bufs.Get().(*[]byte) }
func (bufPool) Put(b []byte) { bufs.Put(&b) }

// serveRole serves h on addr until SIGTERM, printing the bound address on
// the first line of stdout.
func serveRole(addr string, stderr io.Writer, h http.Handler) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// keygateRole runs keygate in this process (cli.Main with args) and writes
// a CPU profile of it until it exits on SIGTERM.
func keygateRole(args []string, cpuProfile string, stdout, stderr io.Writer) int {
	if cpuProfile != "" {
		// The CPU profile starts on SIGUSR1, after the bench's warm-up, so
		// that it shows the measured load only; it is written when keygate
		// stops. SIGUSR2 writes the live heap's profile to cpuProfile.heap.
		f, err := os.Create(cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer f.Close()
		var started sync.Once
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			for s := range ch {
				if s == syscall.SIGUSR1 {
					started.Do(func() {
						if err := pprof.StartCPUProfile(f); err != nil {
							fmt.Fprintln(stderr, err)
						}
					})
					continue
				}
				if h, err := os.Create(cpuProfile + ".heap"); err == nil {
					runtime.GC()
					_ = pprof.Lookup("heap").WriteTo(h, 0)
					_ = h.Close()
				}
			}
		}()
		defer pprof.StopCPUProfile()
	}
	return cli.Main(args, strings.NewReader(""), stdout, stderr)
}
