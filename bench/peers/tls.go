package main

// TLS mode (-tls): every target terminates TLS 1.3 with one ECDSA P-256
// certificate the bench makes, and is loaded over HTTP/1.1 (wrk over
// https) and HTTP/2 (h2load). The upstream stays plain HTTP behind the
// proxies, as deployed; "direct" is the upstream handler on a TLS listener
// of its own, the ceiling.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
)

var (
	//go:embed configs/nginx.conf.tls
	nginxTLSConf string
	//go:embed configs/haproxy.cfg.tls
	haproxyTLSConf string
	//go:embed configs/Caddyfile.tls
	caddyTLSConf string
	//go:embed configs/Caddyfile.log.tls
	caddyLogTLSConf string
)

// tlsSubdir holds the certificate, apart from the logs in the bench's
// dir: keygate watches its cert files' directory for changes.
const tlsSubdir = "tls"

// Protocols of TLS mode's closed loops.
const (
	protoH1 = "HTTP/1.1"
	protoH2 = "HTTP/2"
)

var tlsProtos = []string{protoH1, protoH2}

// benchCert is the certificate every target serves in TLS mode.
type benchCert struct {
	// certFile and keyFile are PEM; pemFile is both in one (HAProxy's crt).
	certFile, keyFile, pemFile string
	pool                       *x509.CertPool
}

// makeCert writes a self-signed ECDSA P-256 certificate for 127.0.0.1
// into dir/tls.
func makeCert(dir string) (*benchCert, error) {
	d := filepath.Join(dir, tlsSubdir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "keygate bench-peers"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	c := &benchCert{
		certFile: filepath.Join(d, "cert.pem"),
		keyFile:  filepath.Join(d, "key.pem"),
		pemFile:  filepath.Join(d, "haproxy.pem"),
		pool:     x509.NewCertPool(),
	}
	c.pool.AddCert(cert)
	for _, f := range []struct {
		path string
		b    []byte
	}{{c.certFile, certPEM}, {c.keyFile, keyPEM}, {c.pemFile, append(slices.Clip(certPEM), keyPEM...)}} {
		if err := os.WriteFile(f.path, f.b, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// scheme is the targets' URL scheme: https in TLS mode.
func (b *bench) scheme() string {
	if b.cert != nil {
		return "https://"
	}
	return "http://"
}

// clientTLS is the bench clients' TLS config: TLS 1.3, trusting the
// bench's certificate only. Nil outside TLS mode.
func (b *bench) clientTLS() *tls.Config {
	if b.cert == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: b.cert.pool}
}

// tlsTemplate is the TLS mode's template for a peer's plain one.
func (b *bench) tlsTemplate(conf, plain string) string {
	if b.cert == nil {
		return plain
	}
	switch conf {
	case "nginx.conf", "nginx-lua.conf", "nginx-lua-keys.conf":
		return nginxTLSConf
	case "haproxy.cfg":
		return haproxyTLSConf
	case "Caddyfile":
		return caddyTLSConf
	case "Caddyfile.log":
		return caddyLogTLSConf
	}
	panic("no TLS template for " + conf)
}

// keygateTLS is the tls: section of the keygate targets' configs.
func (b *bench) keygateTLS() string {
	if b.cert == nil {
		return "tls:\n  mode: \"off\"\n"
	}
	return fmt.Sprintf("tls:\n  mode: files\n  cert_file: %q\n  key_file: %q\n  min_version: \"1.3\"\n", b.cert.certFile, b.cert.keyFile)
}

// roleTLSArgs are the -cert and -key flags of the bench's own roles
// (direct and bare) in TLS mode.
func (b *bench) roleTLSArgs() []string {
	if b.cert == nil {
		return nil
	}
	return []string{"-cert", b.cert.certFile, "-key", b.cert.keyFile}
}

// serveRoleTLS is serveRole over TLS 1.3 with the given certificate;
// net/http offers HTTP/2 beside HTTP/1.1, as it does by default with TLS.
func serveRoleTLS(addr, certFile, keyFile string, stderr io.Writer, h http.Handler) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Println(ln.Addr().String())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS13}}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		_ = srv.Close()
	}()
	if err := srv.ServeTLS(ln, certFile, keyFile); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// startDirectTLS starts the upstream handler on a TLS listener of its own
// as target direct (the ceiling of TLS mode's tables).
func (b *bench) startDirectTLS() error {
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	args := append([]string{b.self, "-role", "upstream", "-listen", addr}, b.roleTLSArgs()...)
	c, err := b.start("direct", args...)
	if err != nil {
		return err
	}
	if err := b.waitReady("direct", addr); err != nil {
		return err
	}
	b.targets = append(b.targets, &target{name: "direct", addr: addr, root: c, args: args})
	return nil
}

// tlsReady is one TLS-mode readiness probe of addr: the bench request
// over HTTP/1.1 and over HTTP/2, each on TLS 1.3, must answer 200, and a
// TLS 1.2 handshake must be refused. It returns "" when all hold, or what
// did not.
func (b *bench) tlsReady(addr string, body []byte, ctype string) string {
	for _, p := range tlsProtos {
		tr := &http.Transport{TLSClientConfig: b.clientTLS(), DisableKeepAlives: true}
		if p == protoH2 {
			tr.ForceAttemptHTTP2 = true
		} else {
			// A non-nil empty map turns HTTP/2 off: ALPN offers http/1.1 only.
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/sync", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("X-Api-Key", b.key)
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		tr.CloseIdleConnections()
		if err != nil {
			return p + ": " + err.Error()
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantProto := map[string]string{protoH1: "HTTP/1.1", protoH2: "HTTP/2.0"}[p]
		switch {
		case resp.StatusCode != http.StatusOK:
			return fmt.Sprintf("%s: status %d: %s", p, resp.StatusCode, rb)
		case resp.Proto != wantProto:
			return fmt.Sprintf("%s: answered over %s", p, resp.Proto)
		case resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13:
			return fmt.Sprintf("%s: not TLS 1.3 (%v)", p, resp.TLS)
		}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: b.cert.pool, MaxVersion: tls.VersionTLS12})
	if err == nil {
		c.Close()
		return "accepts TLS 1.2 (TLS 1.3 only expected)"
	}
	return ""
}

// --- HTTP/2 closed loop (h2load) ----------------------------------------

var (
	reH2Finished = regexp.MustCompile(`finished in [^,]+, ([0-9.]+) req/s`)
	reH2Requests = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed`)
	reH2Status   = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
)

// h2Result reads h2load's summary: rps, requests done, and errors. h2load
// counts as failed every request answered 4xx or 5xx and every one that
// got no answer (errored, timed out); a 3xx, which it counts as a success,
// is an error here too: the bench request is answered 200.
func h2Result(out []byte) (rps float64, done, errs int64, err error) {
	mf, mr, ms := reH2Finished.FindSubmatch(out), reH2Requests.FindSubmatch(out), reH2Status.FindSubmatch(out)
	if mf == nil || mr == nil || ms == nil {
		return 0, 0, 0, errors.New("h2load printed no summary")
	}
	n := func(b []byte) int64 { v, _ := strconv.ParseInt(string(b), 10, 64); return v }
	rps, _ = strconv.ParseFloat(string(mf[1]), 64)
	return rps, n(mr[3]), n(mr[5]) + n(ms[2]), nil
}

// h2Loop runs h2load -c32 -m10 -t2 against t for the bench duration with
// the same multipart body as wrk, and reads t's CPU time around it.
func (b *bench) h2Loop(ctx context.Context, t *target, size int) (closedResult, error) {
	bp, ctype, err := b.h2Body(size)
	if err != nil {
		return closedResult{}, err
	}
	return b.h2Run(ctx, t, bp, ctype, 2, 32)
}

// h2Body writes size's multipart body for h2load and returns its file and
// content type. Side by side it is written before either h2load starts:
// one writing it again while the other reads it could send an empty body.
func (b *bench) h2Body(size int) (path, ctype string, err error) {
	if benchproc.LookPath("h2load") == "" {
		return "", "", errNoH2load
	}
	body, ctype := multipartBody(size, true)
	path = filepath.Join(b.dir, fmt.Sprintf("body-%d.bin", size))
	return path, ctype, os.WriteFile(path, body, 0o600)
}

// h2Run runs h2load -t threads -c conns -m10 against t for the bench
// duration with the body in file bp, and reads t's CPU time around it.
func (b *bench) h2Run(ctx context.Context, t *target, bp, ctype string, threads, conns int) (closedResult, error) {
	h2load := benchproc.LookPath("h2load")
	if h2load == "" {
		return closedResult{}, errNoH2load
	}
	secs := max(1, int(b.o.Duration/time.Second))
	// h2load ends its clients after the duration by closing their
	// sessions, which waits for the streams in flight: bounded, so that a
	// target that stops answering fails the run instead of hanging it.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+time.Minute)
	defer cancel()
	credName, credValue, err := b.credential(ctx, t, 0)
	if err != nil {
		return closedResult{}, err
	}
	cmd := exec.CommandContext(ctx, h2load, fmt.Sprintf("-c%d", conns), "-m10", fmt.Sprintf("-t%d", threads), "-D", strconv.Itoa(secs), "-d", bp,
		"-H", "content-type: "+ctype, "-H", strings.ToLower(credName)+": "+credValue, "https://"+t.addr+"/sync")
	resetHWM(t.root.Process.Pid)
	before, redisBefore := benchproc.CPUTicks(t.root.Process.Pid), t.redisTicks()
	total0, steal0 := benchproc.MachineTicks()
	out, err := cmd.CombinedOutput()
	total1, steal1 := benchproc.MachineTicks()
	after, redisAfter := benchproc.CPUTicks(t.root.Process.Pid), t.redisTicks()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: no end within a minute of the run's %ds; the target stopped answering the streams in flight", err, secs)
		}
		return closedResult{}, fmt.Errorf("h2load %s: %w\n%s", t.name, err, out)
	}
	rps, done, errs, err := h2Result(out)
	if err != nil {
		return closedResult{}, fmt.Errorf("h2load %s: %w\n%s", t.name, err, out)
	}
	r := closedResult{rps: rps, errors: errs, requests: done, steal: benchproc.StealShare(total0, steal0, total1, steal1), peakRSS: memKiB(t.root.Process.Pid, "VmHWM")}
	if done > 0 {
		r.cpuPerReq = float64((after-before)*benchproc.TickMicros) / float64(done)
		r.redisCPUPerReq = float64((redisAfter-redisBefore)*benchproc.TickMicros) / float64(done)
	}
	return r, nil
}

var errNoH2load = errors.New("h2load is not installed: run make deps")

// --- open loop over TLS ---------------------------------------------------

// tlsOpenConns is how many TLS connections the open loop holds: opened
// before its clock starts, and never more, so that what it measures is
// the target's keep-alive path (as wrk's and h2load's runs do) and not a
// storm of handshakes set off by its 512 senders whenever the target
// slows. A request finding all of them busy waits, and the wait counts in
// its latency (measured from its intended send time).
const tlsOpenConns = 64

// openConnCap is the open loop's MaxConnsPerHost: tlsOpenConns in TLS
// mode, no cap in plain mode.
func (b *bench) openConnCap() int {
	if b.cert == nil {
		return 0
	}
	return tlsOpenConns
}

// warmOpen opens the open loop's TLS connections with a few bench
// requests before its clock starts (nothing in plain mode).
func (b *bench) warmOpen(ctx context.Context, client *http.Client, url string, body []byte, ctype string) {
	if b.cert == nil {
		return
	}
	var wg sync.WaitGroup
	for range tlsOpenConns {
		wg.Go(func() {
			for range 2 {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", ctype)
				req.Header.Set("X-Api-Key", b.key)
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
}

// --- measuring and tables ---------------------------------------------------

// tlsResults are TLS mode's figures: closed loops by target, protocol and
// size; the open loop (HTTP/1.1) by target and size.
type tlsResults struct {
	order   []string
	closed  map[string]map[string]map[int][]closedResult
	open    map[string]map[int][]openResult
	skipped []string
}

// measureTLS runs every rep, in alternating target order: for each size,
// wrk over HTTP/1.1, h2load over HTTP/2 and the open loop over HTTP/1.1.
// Large uploads are not part of TLS mode.
func (b *bench) measureTLS(ctx context.Context) (*tlsResults, error) {
	res := &tlsResults{closed: map[string]map[string]map[int][]closedResult{}, open: map[string]map[int][]openResult{}}
	for _, t := range b.targets {
		res.order = append(res.order, t.name)
		res.closed[t.name] = map[string]map[int][]closedResult{protoH1: {}, protoH2: {}}
		res.open[t.name] = map[int][]openResult{}
	}
	skip := func(what string) {
		if !slices.Contains(res.skipped, what) {
			res.skipped = append(res.skipped, what)
		}
	}
	for rep := range b.o.Reps {
		ts := slices.Clone(b.targets)
		if rep%2 == 1 {
			slices.Reverse(ts)
		}
		for _, t := range ts {
			if err := b.warmUp(ctx, t, sizes(b.o)[0]); err != nil {
				return nil, err
			}
			for _, size := range sizes(b.o) {
				for _, p := range tlsProtos {
					run, missing := b.closedLoop, errNoWrk
					if p == protoH2 {
						run, missing = b.h2Loop, errNoH2load
					}
					c, err := run(ctx, t, size)
					switch {
					case errors.Is(err, missing) && b.o.Smoke:
						skip(missing.Error())
						continue
					case err != nil:
						return nil, err
					}
					res.closed[t.name][p][size] = append(res.closed[t.name][p][size], c)
					b.logf("rep %d %-13s %-7s %-8s closed: %.0f rps, %.1f CPU µs/req, steal %.1f%%, %d errors", rep+1, t.name, sizeName(size), p, c.rps, c.cpuPerReq, 100*c.steal, c.errors)
				}
				o, err := b.openLoop(ctx, t, size, rate(b.o, size))
				if err != nil {
					return nil, err
				}
				res.open[t.name][size] = append(res.open[t.name][size], o)
				b.logf("rep %d %-13s %-7s open %d rps: p50 %s p99 %s, %d/%d errors", rep+1, t.name, sizeName(size), rate(b.o, size), ms(o.p50), ms(o.p99), o.errors, o.sent)
			}
		}
	}
	return res, nil
}

// printTLSTables prints TLS mode's medians as Markdown: one closed-loop
// table per protocol, then the open loop.
func printTLSTables(w io.Writer, o Options, r *tlsResults) {
	sz := sizes(o)
	secs := max(1, int(o.Duration/time.Second))
	fmt.Fprintf(w, "TLS 1.3 (only), one self-signed ECDSA P-256 certificate for every target, HTTP/1.1 and HTTP/2 offered by ALPN; the upstream behind the proxies is plain HTTP. "+
		"direct is the upstream's handler on a Go TLS listener of its own (the ceiling); bare is the tuned `httputil.ReverseProxy` on a Go `http.Server` with TLS, bare-redis the same with one redis_rate decision a request in a redis-server of its own. "+
		"Median of %d rep(s) in alternating order%s, %ds per run; rps as a ratio to direct, to bare and to caddy; CPU µs/req of the target's process tree; errors are every run's non-2xx answers and failed requests. "+
		"Large uploads are not run in TLS mode.\n\n", o.Reps, warmNote(o), secs)
	for _, s := range r.skipped {
		fmt.Fprintf(w, "(%s: skipped)\n\n", s)
	}
	cmds := map[string]string{
		protoH1: fmt.Sprintf("`wrk -t2 -c32 -d%ds -s sync.lua https://127.0.0.1:PORT/sync` (keep-alive, the plain mode's script)", secs),
		protoH2: fmt.Sprintf("`h2load -c32 -m10 -t2 -D %d -d body.bin -H 'content-type: multipart/form-data; boundary=…' -H 'x-api-key: …' https://127.0.0.1:PORT/sync`", secs),
	}
	for _, p := range tlsProtos {
		fmt.Fprintf(w, "%s over TLS 1.3, closed loop: %s.\n\n", p, cmds[p])
		sizedHead(w, sz, func(s int) []string {
			return []string{sizeName(s) + " × direct", "× bare", "× caddy", "CPU µs/req", "errors"}
		})
		rps := func(name string, size int) float64 {
			return median(r.closed[name][p][size], func(c closedResult) float64 { return c.rps })
		}
		for _, name := range r.order {
			fmt.Fprintf(w, "| %s |", name)
			for _, s := range sz {
				var errs int64
				for _, c := range r.closed[name][p][s] {
					errs += c.errors
				}
				cpu := median(r.closed[name][p][s], func(c closedResult) float64 { return c.cpuPerReq })
				fmt.Fprintf(w, " %s | %s | %s | %.0f | %d |", ratio(rps(name, s), rps("direct", s)), ratio(rps(name, s), rps("bare", s)), ratio(rps(name, s), rps("caddy", s)), cpu, errs)
			}
			fmt.Fprint(w, "\n")
		}
		fmt.Fprintf(w, "\n%s, absolute rps:", p)
		for _, name := range []string{"direct", "bare"} {
			for _, s := range sz {
				if v := rps(name, s); v > 0 {
					fmt.Fprintf(w, " %s %s %.0f;", name, sizeName(s), v)
				}
			}
		}
		fmt.Fprint(w, "\n\n")
		if o.Reps > 1 {
			repSpread(w, p+" rps of every rep", r.order, sz, func(name string, size int) []closedResult { return r.closed[name][p][size] })
		}
	}

	p := func(name string, size int, f func(openResult) time.Duration) float64 {
		return median(r.open[name][size], func(o openResult) float64 { return float64(f(o)) / float64(time.Millisecond) })
	}
	fmt.Fprintf(w, "Open loop over TLS 1.3, HTTP/1.1 keep-alive (Go client trusting the bench's certificate; its %d connections opened before the clock starts, and no more: handshakes are not what it measures): constant arrival rate, latency from the intended send time, ms (median over reps).\n\n", tlsOpenConns)
	sizedHead(w, sz, func(s int) []string {
		return []string{fmt.Sprintf("%s @ %d/s p50", sizeName(s), rate(o, s)), "p99", "p99 − bare", "errors"}
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
			errs := 0
			for _, x := range r.open[name][s] {
				errs += x.errors
			}
			fmt.Fprintf(w, " %.2f | %.2f | %s | %d |", p(name, s, p50), p(name, s, p99), d, errs)
		}
		fmt.Fprint(w, "\n")
	}
}
