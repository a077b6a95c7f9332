// Command churn is `make bench-churn`: keys issued and revoked through the
// admin API while two keygate replicas share one Redis keystore and one of
// them is under full load. It measures what the churn costs the request
// path (closed-loop rps and CPU per request, open-loop p50 and p99, each
// against a baseline phase without churn, phases alternating over the
// reps) and how soon each revocation is refused on both replicas.
//
// It starts redis-server on a free loopback port, fills the keystore with
// -keys random records, starts a plain upstream and two replicas (Redis
// keystore, the limiter of -limiter, the admin API on each), and prints
// Markdown tables. The same binary also plays the upstream and the churn
// driver (-role), so that each runs as a process of its own whose CPU time
// is read from /proc apart from keygate's.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs the bench, or one role of it, and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("churn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	var d driverConfig
	role := fs.String("role", "", "internal: upstream | driver | keygate")
	listen := fs.String("listen", "127.0.0.1:0", "internal: the upstream's listen address")
	admins := fs.String("admins", "", "internal (driver): the replicas' admin API base URLs, comma-separated")
	probes := fs.String("probes", "", "internal (driver): the replicas' /sync URLs, comma-separated")
	fs.StringVar(&d.Token, "token", "", "internal (driver): the admin token (default: $CHURN_ADMIN_TOKEN)")
	fs.StringVar(&d.Context, "context", benchContext, "internal (driver): the context of the keys it issues")
	fs.DurationVar(&d.Lifetime, "lifetime", time.Second, "how long an issued key lives (once both replicas accept it) before the driver revokes it")
	fs.DurationVar(&d.ProbeEvery, "probe-every", 20*time.Millisecond, "how often the driver probes a replica with a revoked key until it is refused (after ten probes, up to five times as long apart)")
	fs.IntVar(&o.Rate, "rate", 100, "admin changes per second during churn, issues and revocations half each")
	fs.IntVar(&o.Keys, "keys", 100_000, "keys in the Redis keystore besides the load key")
	fs.IntVar(&o.Reps, "reps", 2, "repetitions of baseline and churn, in alternating order")
	fs.DurationVar(&o.Duration, "duration", 30*time.Second, "length of each closed-loop and each open-loop run (a phase is one of each)")
	fs.IntVar(&o.OpenRate, "open-rate", 1000, "open-loop arrival rate, requests/s (well under what replica 1 serves closed-loop, or the open loop measures a queue)")
	fs.IntVar(&o.Size, "size", 256, "file size of the load's multipart /sync body, bytes")
	fs.StringVar(&o.Admin, "admin", "both", "whose admin API the driver calls: both (alternately), 1 (the loaded replica's) or 2 (the other's)")
	fs.StringVar(&o.Load, "load", "both", "whom the load goes to: both replicas (evenly, as a load balancer spreads a fleet's load) or 1 (replica 1; replica 2 only serves the driver)")
	fs.StringVar(&o.Audit, "audit", "file", "the replicas' audit.file: file (a JSON-lines file, fsync'ed per event) or none (the Redis stream alone, as deploy/'s Kubernetes manifests set it)")
	fs.StringVar(&o.Limiter, "limiter", "redis", "the replicas' rate limiter: redis or local")
	fs.StringVar(&o.KeygateBin, "keygate", "", "keygate binary (default: built from ./cmd/keygate)")
	fs.StringVar(&o.Profile, "profile", "", "a directory: write CPU profiles of both replicas over the last rep's closed-loop runs there (the keystore, change log and audit log are largest then), and over its churn with no load (replica1-baseline.pprof, replica1-churn.pprof, replica1-alone.pprof, replica2-…)")
	fs.BoolVar(&o.Smoke, "smoke", os.Getenv("BENCH_SMOKE") == "1", "1000 keys, 3 s runs, one rep: proves the bench works; measures nothing")
	fs.BoolVar(&o.Keep, "keep", false, "keep the run's directory (logs, configs) and print its path")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	d.Rate, o.Lifetime, o.ProbeEvery = o.Rate, d.Lifetime, d.ProbeEvery
	switch *role {
	case "":
		if err := Run(context.Background(), o, stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "bench-churn:", err)
			return 1
		}
		return 0
	case "upstream":
		return serveUpstream(*listen, stderr)
	case "keygate":
		return keygateRole(fs.Args(), stdout, stderr)
	case "driver":
		if d.Token == "" {
			d.Token = os.Getenv("CHURN_ADMIN_TOKEN")
		}
		d.Admins, d.Probes = splitList(*admins), splitList(*probes)
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := runDriver(ctx, d, stdout); err != nil {
			fmt.Fprintln(stderr, "churn driver:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "unknown role %q\n", *role)
	return 2
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// serveUpstream is the plain upstream: it consumes the body and answers a
// small 200, until SIGTERM. The bound address is its first line of stdout.
func serveUpstream(addr string, stderr io.Writer) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"StateText":"OK"}`)
	})}
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
