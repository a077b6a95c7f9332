package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/keystore"
)

// Options are the bench's knobs (see the flags in main.go).
type Options struct {
	Reps     int
	Duration time.Duration
	Smoke    bool
	Targets  string
	Profile  string
	// ProfileRedis profiles keygate with the Redis limiter.
	ProfileRedis bool
	// ProfileLarge profiles the large uploads (context first, 5 rounds)
	// instead of the wrk load.
	ProfileLarge bool
	// ProfileH2 (with TLS) loads keygate with h2load over HTTP/2.
	ProfileH2 bool
	LargeMiB  int
	LargeN    int
	// LargeRounds is how many times each rep uploads the large files
	// after the target's restart: the time is the median over every
	// round of every rep, peak RSS and spool the largest of them. With
	// LargeN or LargeRounds 0 no large uploads run (nor their restarts)
	// and their table is not printed.
	LargeRounds int
	Sizes       string
	BaseBin     string
	// BaseRev, instead of BaseBin, builds the base from a git revision
	// of keygate's repository (benchproc.BuildKeygateAt).
	BaseRev    string
	KeygateBin string
	// TLS is TLS mode (tls.go): every target terminates TLS 1.3.
	TLS bool
	// RoleBin plays the upstream, direct and bare roles (default: this
	// binary). TestSmokeTLS gives one built without -race.
	RoleBin string
	// Keys, when positive, adds the many-keys targets (keys.go).
	Keys int
	// Refusals adds, in plain mode, a closed loop of made-up keys against
	// every target that checks keys (refusalLoop).
	Refusals bool
	// SideBySide adds rounds that load each keygate target and its base
	// at the same time (sidebyside.go), over both protocols in TLS mode;
	// without BaseBin the base is a second copy of the keygate binary.
	SideBySide bool
	// OnlySideBySide runs the side-by-side rounds alone, without the
	// runs one after another and their tables: the quick check that a
	// build is no slower than another.
	OnlySideBySide bool
	// Warmup is a closed-loop run, not measured, that every target gets
	// after each start before its measured loads: each is measured warm
	// (heap grown, pools and caches filled), as a running proxy is.
	Warmup time.Duration
}

// check refuses the flags that measure nothing they say: TLS mode's
// tables have no many-keys or refusals rows (h2load sends one set of
// headers with every request, so it cannot spread a load over keys).
// A profile may have both: its load is wrk's, which spreads keys over
// TLS as in plain mode.
func (o Options) check() error {
	if o.BaseRev != "" && o.BaseBin != "" {
		return errors.New("-keygate-base and -keygate-base-rev both name the base: give one")
	}
	if o.SideBySide && o.Profile != "" {
		return errors.New("-side-by-side measures; -profile profiles: give one")
	}
	if !o.TLS || o.Profile != "" {
		return nil
	}
	switch {
	case o.Keys > 0:
		return errors.New("-keys measures in plain mode only: h2load sends one key with every request (with -profile, -tls -keys profiles keygate over TLS)")
	case o.Refusals:
		return errors.New("-refusals measures in plain mode only")
	}
	return nil
}

// runsLarge says whether the plain mode's reps upload large files.
func (o Options) runsLarge() bool { return o.LargeN > 0 && o.LargeRounds > 0 }

// largeModes are the large uploads' modes, context first or after, that
// each rep runs: none without large uploads.
func (o Options) largeModes() []bool {
	if !o.runsLarge() {
		return nil
	}
	return []bool{true, false}
}

var (
	//go:embed configs/nginx.conf
	nginxConf string
	//go:embed configs/nginx-lua.tmpl
	nginxLuaTmpl string
	//go:embed configs/haproxy.cfg
	haproxyConf string
	//go:embed configs/Caddyfile
	caddyConf string
	//go:embed configs/Caddyfile.log
	caddyLogConf string
)

// pool is keygate's default upstreams.*.max_idle_conns_per_host; the bare
// proxy and the peers get the same.
const pool = gateway.DefaultMaxIdleConnsPerHost

const benchContext = "3f2b8c1e-6a4d-4e8b-9c2a-7d5e1f0a9b34"

// target is one thing under test, listening on addr. root is the process
// whose tree's CPU time and memory are measured.
type target struct {
	name string
	addr string
	root *exec.Cmd
	// args start it again (nil for direct, whose process is shared).
	args []string
	// spool is keygate's spool dir (empty for others).
	spool string
	// redis is the redis-server of a Redis-limiter target (nil for others):
	// its CPU per request is reported beside the target's.
	redis *exec.Cmd
	// warm is false from each start until its warm-up run.
	warm bool
	// token is a bearer target's token (bearer.go).
	token bearerToken
}

// bench holds what a run started, to stop it at the end.
type bench struct {
	o       Options
	dir     string
	key     string
	keyID   string // the key's id: a bearer target's client_id
	procs   []*exec.Cmd
	targets []*target
	stderr  io.Writer
	self    string
	// cert is TLS mode's certificate (nil in plain mode).
	cert *benchCert
	keys keysState // -keys (keys.go)
}

// Run starts every target, measures them, and prints the tables.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if o.Smoke {
		o.Reps, o.Duration, o.LargeMiB, o.LargeN, o.LargeRounds, o.Warmup = 1, time.Second, 1, 2, 1, 0
	}
	if o.Reps < 1 {
		o.Reps = 1
	}
	if o.OnlySideBySide {
		o.SideBySide = true
	}
	if err := o.check(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "keygate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if o.RoleBin != "" {
		self = o.RoleBin
	}
	b := &bench{o: o, dir: dir, stderr: stderr, self: self}
	defer b.stopAll()
	if o.BaseRev != "" {
		start := time.Now()
		bin, commit, err := benchproc.BuildKeygateAt(o.BaseRev, dir)
		if err != nil {
			return err
		}
		b.o.BaseBin, b.o.BaseRev = bin, fmt.Sprintf("%s (%s)", o.BaseRev, commit[:12])
		b.logf("keygate-base: built at %s in %s", b.o.BaseRev, time.Since(start).Round(time.Second))
	}
	if o.TLS {
		if b.cert, err = makeCert(dir); err != nil {
			return err
		}
	}
	if o.Profile != "" {
		return b.profile(ctx, stdout)
	}
	if err := b.startAll(); err != nil {
		return err
	}
	switch {
	case o.OnlySideBySide:
	case o.TLS:
		res, err := b.measureTLS(ctx)
		if err != nil {
			return err
		}
		printTLSTables(stdout, o, res)
	default:
		res, err := b.measure(ctx)
		if err != nil {
			return err
		}
		printTables(stdout, o, res)
		b.printKeysTables(stdout, res)
	}
	if o.SideBySide {
		rounds, err := b.sideBySide(ctx)
		if err != nil {
			return err
		}
		printSideBySide(stdout, b.o, rounds)
	}
	return nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.stderr, "bench-peers: "+format+"\n", args...)
}

func (b *bench) want(name string) bool {
	if base, ok := strings.CutPrefix(name, "keygate-base"); ok && b.o.SideBySide {
		// Side by side, each keygate target runs with its base.
		return b.want("keygate" + base)
	}
	if b.o.Targets == "" {
		return true
	}
	return slices.Contains(strings.Split(b.o.Targets, ","), name)
}

// start runs a process with its output in dir/name.log.
func (b *bench) start(name string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(b.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = b.dir
	cmd.Env = append(os.Environ(), "HOME="+b.dir, "XDG_DATA_HOME="+b.dir, "XDG_CONFIG_HOME="+b.dir)
	// Its own process group, so that stop reaches its children; and
	// killed with the bench should the bench die before stopAll (a
	// SIGPIPE from `| head`, say), rather than left serving.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	logf.Close()
	b.procs = append(b.procs, cmd)
	return cmd, nil
}

func (b *bench) stopAll() {
	for i := len(b.procs) - 1; i >= 0; i-- {
		benchproc.Stop(b.procs[i])
	}
	b.procs = nil
}

// restart starts t afresh on the same address, so that what a phase
// measures in memory is not what an earlier phase left behind.
func (b *bench) restart(t *target) error {
	if t.args == nil {
		return nil
	}
	benchproc.Stop(t.root)
	b.procs = slices.DeleteFunc(b.procs, func(c *exec.Cmd) bool { return c == t.root })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := b.start(t.name, t.args...)
		if err != nil {
			return err
		}
		if err = b.waitReady(t.name, t.addr); err == nil {
			t.root, t.warm = c, false
			return nil
		}
		benchproc.Stop(c)
		b.procs = slices.DeleteFunc(b.procs, func(x *exec.Cmd) bool { return x == c })
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitReady waits until addr answers the bench request with 200.
func (b *bench) waitReady(name, addr string) error {
	deadline := time.Now().Add(20 * time.Second)
	body, ctype := multipartBody(64, true)
	var last string
	for time.Now().Before(deadline) {
		if b.cert != nil && name != "upstream" {
			// TLS mode: both protocols, TLS 1.3 only (tls.go).
			if last = b.tlsReady(addr, body, ctype); last == "" {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/sync", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("X-Api-Key", b.key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			rb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, rb)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs, _ := os.ReadFile(filepath.Join(b.dir, name+".log"))
	return fmt.Errorf("%s on %s never answered 200 (%s); its log:\n%s", name, addr, last, tail(logs, 2000))
}

// checksKeys says whether target name checks the API key: keygate's
// targets and nginx-lua's. The other peers proxy whatever comes.
func checksKeys(name string) bool {
	return strings.HasPrefix(name, "nginx-lua") || strings.HasPrefix(name, "keygate")
}

// checkRefusals makes sure a target that checks keys does: a request
// with no key and one with a made-up key of the right shape each get 401
// with the spec's error body, so that no figure of the bench comes from
// a peer that lets everything through.
func (b *bench) checkRefusals(name, addr string) error {
	madeUp, err := keystore.Generate(keystore.Live)
	if err != nil {
		return err
	}
	client := b.client()
	defer client.CloseIdleConnections()
	for _, c := range []struct{ what, key string }{{"no key", ""}, {"a made-up key", madeUp}} {
		status, rb, err := b.postSync(context.Background(), client, addr, c.key)
		if err != nil {
			return fmt.Errorf("%s: a request with %s: %w", name, c.what, err)
		}
		if status != http.StatusUnauthorized || !bytes.Contains(rb, []byte(`"StateText":"ERROR"`)) {
			return fmt.Errorf("%s answered a request with %s with %d %s, want 401 and the spec's error body", name, c.what, status, rb)
		}
	}
	return nil
}

// client is an HTTP client for the bench's own one-off requests to a
// target: its TLS config in TLS mode, and a 10 s limit.
func (b *bench) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: b.clientTLS()}}
}

// postSync sends the bench's small /sync request to addr with key (none
// when empty) and returns the answer's status and body.
func (b *bench) postSync(ctx context.Context, client *http.Client, addr, key string) (int, []byte, error) {
	body, ctype := multipartBody(64, true)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.scheme()+addr+"/sync", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", ctype)
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return resp.StatusCode, rb, err
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (b *bench) buildKeygate() (string, error) {
	if b.o.KeygateBin != "" {
		return b.o.KeygateBin, nil
	}
	root, err := benchproc.ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(b.dir, "keygate")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/keygate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/keygate: %w\n%s", err, out)
	}
	return bin, nil
}

// keygateConfig writes a config for a keygate on listen with the given
// limiter backend (with the ratelimit section's other lines it needs, if
// any), and returns its path and spool dir.
func (b *bench) keygateConfig(name, listen, upstream, backend, redisAddr string) (string, string, error) {
	admin, err := benchproc.FreeAddr()
	if err != nil {
		return "", "", err
	}
	spool := filepath.Join(b.dir, name+"-spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return "", "", err
	}
	if redisAddr == "" {
		redisAddr = "127.0.0.1:6379"
	}
	// The keystore file gets a directory of its own: keygate watches the
	// directory, and the logs every target writes into b.dir would wake
	// its watcher, during every target's runs.
	keysDir := filepath.Join(b.dir, "keys")
	if err := os.MkdirAll(keysDir, 0o700); err != nil {
		return "", "", err
	}
	cfg := fmt.Sprintf(`server:
  listen: %q
  admin_listen: %q
  spool_dir: %q
  max_body_bytes: 104857600
%supstreams:
  extraction: { targets: ["http://%s"], max_idle_conns_per_host: %d }
  registry: { targets: ["http://%s"], max_idle_conns_per_host: %d }
keystore: { backend: file, file: %q }
redis: { addrs: [%q] }
ratelimit:
  backend: %s
  max_concurrent: 0
  limits:
    live: { rate: 1000000, per: 1s, burst: 1000000000 }
    test: { rate: 1000000, per: 1s, burst: 1000000000 }
log: { level: info, format: json }
`, listen, admin, spool, b.keygateTLS(), upstream, pool, upstream, pool, filepath.Join(keysDir, "keys.yaml"), redisAddr, backend)
	cfg = bearerConfig(name, b.keysConfig(name, cfg))
	p := filepath.Join(b.dir, name+".yaml")
	return p, spool, os.WriteFile(p, []byte(cfg), 0o600)
}

func (b *bench) issueKey(bin, cfg string) error {
	cmd := exec.Command(bin, "keys", "issue", "--config", cfg, "--product", "extraction", "--env", "live", "--context", benchContext, "--name", "bench")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("keygate keys issue: %w: %s", err, errb.String())
	}
	b.key = strings.TrimSpace(out.String())
	// "issued key_…: product=…" on stderr.
	id, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(errb.String()), "issued "), ":")
	if !strings.HasPrefix(id, "key_") {
		return fmt.Errorf("keygate keys issue: no key id in %q", errb.String())
	}
	b.keyID = id
	return nil
}

type confData struct {
	// Name is the target's: it names its pid file, logs and temp dirs.
	Name, Dir, Listen, Upstream string
	Pool, Workers               int
	// Lua is set for nginx-lua only (configs/nginx-lua.tmpl).
	Lua *luaConf
}

// luaConf is what nginx-lua's templates need.
type luaConf struct {
	Modules  string // the directory of ndk_http_module.so and ngx_http_lua_module.so
	Path     string // the directory of lua-resty-core's modules
	KeysFile string // "<hex sha256> <key id>" lines
}

func (b *bench) writeConf(name, tmpl string, d confData) (string, error) {
	t, err := template.New(name).Parse(tmpl)
	if err == nil && d.Lua != nil {
		t, err = t.Parse(nginxLuaTmpl)
	}
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return "", err
	}
	p := filepath.Join(b.dir, name)
	return p, os.WriteFile(p, buf.Bytes(), 0o600)
}

// startAll starts the upstream, then every wanted target, and checks each
// answers the bench request with 200.
func (b *bench) startAll() error {
	upAddr, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	up, err := b.start("upstream", b.self, "-role", "upstream", "-listen", upAddr)
	if err != nil {
		return err
	}
	bin, err := b.buildKeygate()
	if err != nil {
		return err
	}
	// The key is needed before any readiness check.
	cfg0, _, err := b.keygateConfig("issue", "127.0.0.1:0", upAddr, "local", "")
	if err != nil {
		return err
	}
	if err := b.issueKey(bin, cfg0); err != nil {
		return err
	}
	if err := b.prepareKeys(filepath.Join(b.dir, "keys", "keys.yaml")); err != nil {
		return err
	}
	if err := b.waitReady("upstream", upAddr); err != nil {
		return err
	}
	if b.want("direct") && b.cert != nil {
		if err := b.startDirectTLS(); err != nil {
			return err
		}
	} else if b.want("direct") {
		b.targets = append(b.targets, &target{name: "direct", addr: upAddr, root: up})
	}
	workers := runtime.NumCPU()
	add := func(name string, cmdFor func(addr string) ([]string, error)) error {
		if !b.want(name) {
			return nil
		}
		addr, err := benchproc.FreeAddr()
		if err != nil {
			return err
		}
		args, err := cmdFor(addr)
		if err != nil {
			return err
		}
		if args == nil {
			b.logf("%s is not installed; skipped (run make deps)", name)
			return nil
		}
		c, err := b.start(name, args...)
		if err != nil {
			return err
		}
		if err := b.waitReady(name, addr); err != nil {
			return err
		}
		if checksKeys(name) {
			if err := b.checkRefusals(name, addr); err != nil {
				return err
			}
		}
		b.targets = append(b.targets, &target{name: name, addr: addr, root: c, args: args})
		return nil
	}
	if err := add("bare", func(addr string) ([]string, error) {
		return append([]string{b.self, "-role", "bare", "-listen", addr, "-upstream", upAddr, "-pool", fmt.Sprint(pool)}, b.roleTLSArgs()...), nil
	}); err != nil {
		return err
	}
	// The bare proxy with a redis_rate limit, in a redis-server of its own
	// whose CPU is counted beside it, as keygate-redis's is.
	if b.want("bare-redis") {
		redisAddr, redisProc, err := b.startRedis()
		if err != nil {
			return err
		}
		if err := add("bare-redis", func(addr string) ([]string, error) {
			return append([]string{b.self, "-role", "bare", "-listen", addr, "-upstream", upAddr, "-pool", fmt.Sprint(pool), "-redis", redisAddr}, b.roleTLSArgs()...), nil
		}); err != nil {
			return err
		}
		b.targets[len(b.targets)-1].redis = redisProc
	}
	// Traefik with its Redis rate limiter (traefik.go).
	if b.want("traefik-redis") {
		if err := b.startTraefik(add, upAddr); err != nil {
			return err
		}
	}
	peer := func(name, bin, conf, tmpl string, args func(conf string) []string) func(string) ([]string, error) {
		return func(addr string) ([]string, error) {
			exe, missing := benchproc.LookPath(bin), bin
			var lua *luaConf
			if exe != "" && strings.HasPrefix(name, "nginx-lua") {
				var err error
				if lua, err = b.nginxLua(name); err != nil {
					return nil, err
				}
				if lua == nil {
					exe, missing = "", "nginx's Lua module (libnginx-mod-http-lua)"
				}
			}
			if exe == "" {
				if b.o.Smoke {
					return nil, nil
				}
				return nil, fmt.Errorf("%s is not installed: run make deps", missing)
			}
			p, err := b.writeConf(conf, b.tlsTemplate(conf, tmpl), confData{Name: name, Dir: b.dir, Listen: addr, Upstream: upAddr, Pool: pool, Workers: workers, Lua: lua})
			if err != nil {
				return nil, err
			}
			return append([]string{exe}, args(p)...), nil
		}
	}
	nginxArgs := func(c string) []string { return []string{"-p", b.dir, "-c", c} }
	for _, name := range []string{"nginx", "nginx-lua", "nginx-lua-keys"} {
		for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
			_ = os.MkdirAll(filepath.Join(b.dir, name+"-"+d), 0o700)
		}
	}
	if err := add("nginx", peer("nginx", "nginx", "nginx.conf", nginxConf, nginxArgs)); err != nil {
		return err
	}
	if err := add("nginx-lua", peer("nginx-lua", "nginx", "nginx-lua.conf", nginxConf, nginxArgs)); err != nil {
		return err
	}
	if b.o.Keys > 0 {
		if err := add("nginx-lua-keys", peer("nginx-lua-keys", "nginx", "nginx-lua-keys.conf", nginxConf, nginxArgs)); err != nil {
			return err
		}
	}
	if err := add("haproxy", peer("haproxy", "haproxy", "haproxy.cfg", haproxyConf, func(c string) []string { return []string{"-db", "-f", c} })); err != nil {
		return err
	}
	caddyArgs := func(c string) []string { return []string{"run", "--config", c, "--adapter", "caddyfile"} }
	if err := add("caddy", peer("caddy", "caddy", "Caddyfile", caddyConf, caddyArgs)); err != nil {
		return err
	}
	if err := add("caddy-log", peer("caddy-log", "caddy", "Caddyfile.log", caddyLogConf, caddyArgs)); err != nil {
		return err
	}
	base := b.o.BaseBin
	if base == "" && b.o.SideBySide {
		base = bin // a second copy: how far two of one binary differ
	}
	for _, kg := range []struct{ name, exe, backend string }{
		{"keygate", bin, "local"},
		{"keygate-redis", bin, "redis"},
		// The Redis limiter with leases (ratelimit.lease), as
		// docs/explanation/rate-limiting.md suggests turning them on.
		{"keygate-redis-lease", bin, "redis\n  lease: " + leaseTTL},
		{"keygate-base", base, "local"},
		{"keygate-base-redis", base, "redis"},
		{"keygate-bearer", bin, "local"},
		{"keygate-base-bearer", base, "local"},
		{"keygate-keys", b.keysBin(bin), "local"},
		{"keygate-redis-keys", b.keysBin(bin), "redis"},
	} {
		name, exe, backend := kg.name, kg.exe, kg.backend
		if !b.want(name) || exe == "" {
			continue
		}
		redisAddr := ""
		var redisProc *exec.Cmd
		if strings.HasPrefix(backend, "redis") {
			if redisAddr, redisProc, err = b.startRedis(); err != nil {
				return err
			}
		}
		var spool string
		if err := add(name, func(addr string) ([]string, error) {
			cfg, sp, err := b.keygateConfig(name, addr, upAddr, backend, redisAddr)
			spool = sp
			return []string{exe, "serve", "--config", cfg}, err
		}); err != nil {
			return err
		}
		b.targets[len(b.targets)-1].spool = spool
		b.targets[len(b.targets)-1].redis = redisProc
		b.keysNoteRedis(name, redisAddr)
	}
	return nil
}

// leaseTTL is keygate-redis-lease's ratelimit.lease.
const leaseTTL = "20ms"

func (b *bench) startRedis() (string, *exec.Cmd, error) {
	exe := benchproc.LookPath("redis-server")
	if exe == "" {
		return "", nil, errors.New("redis-server is not installed: run make deps")
	}
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	proc, err := b.start("redis", exe, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", b.dir)
	if err != nil {
		return "", nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return addr, proc, nil
			}
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("redis-server on %s did not start", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// profile runs keygate (local limiter, or Redis with ProfileRedis) in a child of this binary with the
// CPU profiler on, loads it with wrk at each size (-sizes), and stops it
// so that the profile is written.
func (b *bench) profile(ctx context.Context, stdout io.Writer) error {
	upAddr, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	if _, err := b.start("upstream", b.self, "-role", "upstream", "-listen", upAddr); err != nil {
		return err
	}
	bin, err := b.buildKeygate()
	if err != nil {
		return err
	}
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	backend, redisAddr := "local", ""
	if b.o.ProfileRedis {
		backend = "redis"
		if redisAddr, _, err = b.startRedis(); err != nil {
			return err
		}
	}
	cfg, _, err := b.keygateConfig("keygate", addr, upAddr, backend, redisAddr)
	if err != nil {
		return err
	}
	if err := b.issueKey(bin, cfg); err != nil {
		return err
	}
	name, cfg, err := b.profileKeys(cfg, addr, upAddr, backend, redisAddr)
	if err != nil {
		return err
	}
	out, err := filepathAbs(b.o.Profile)
	if err != nil {
		return err
	}
	kg, err := b.start(name, b.self, "-role", "keygate", "-cpuprofile", out, "serve", "--config", cfg)
	if err != nil {
		return err
	}
	if err := b.waitReady(name, addr); err != nil {
		return err
	}
	t := &target{name: name, addr: addr, root: kg}
	if err := b.warmKeys(ctx, t); err != nil {
		return err
	}
	// The profile covers the loads below, not the start or the warm-up.
	if err := kg.Process.Signal(syscall.SIGUSR1); err != nil {
		return err
	}
	if b.o.ProfileLarge {
		for range 5 {
			r, err := b.large(ctx, t, true)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "keygate %d × %d MiB, context first: %s\n", b.o.LargeN, b.o.LargeMiB, r.elapsed.Round(time.Millisecond))
		}
		b.stopAll()
		fmt.Fprintf(stdout, "CPU profile: %s (go tool pprof -top %s)\n", out, out)
		return nil
	}
	for _, size := range sizes(b.o) {
		loop := b.closedLoop
		if b.o.ProfileH2 {
			loop = b.h2Loop
		}
		r, err := loop(ctx, t, size)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "keygate %s: %.0f rps, %.0f CPU µs/req\n", sizeName(size), r.rps, r.cpuPerReq)
	}
	heap := writeHeapProfile(kg, out)
	b.stopAll()
	fmt.Fprintf(stdout, "CPU profile: %s (go tool pprof -top %s)%s\n", out, out, heap)
	return nil
}

// writeHeapProfile asks the keygate role kg to write its live heap's
// profile next to the CPU profile out, and waits for it (up to 10 s); it
// returns a note for the bench's output.
func writeHeapProfile(kg *exec.Cmd, out string) string {
	_ = os.Remove(out + ".heap")
	if err := kg.Process.Signal(syscall.SIGUSR2); err != nil {
		return ""
	}
	for range 100 {
		time.Sleep(100 * time.Millisecond)
		if st, err := os.Stat(out + ".heap"); err == nil && st.Size() > 0 {
			time.Sleep(100 * time.Millisecond) // the write's end
			return fmt.Sprintf("; live heap: %s.heap", out)
		}
	}
	return ""
}

func filepathAbs(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	root, err := benchproc.ModuleRoot()
	if err != nil {
		return filepath.Abs(p)
	}
	return filepath.Join(root, p), nil
}

// Where Debian's libnginx-mod-http-lua and lua-resty-core put their files.
const (
	nginxModules = "/usr/lib/nginx/modules"
	luaPath      = "/usr/share/lua/5.1"
)

// luaInstalled says whether nginx's Lua module and lua-resty-core are.
func luaInstalled() bool {
	for _, f := range []string{nginxModules + "/ngx_http_lua_module.so", nginxModules + "/ndk_http_module.so", luaPath + "/resty/core.lua"} {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return true
}

// nginxLua is the template data of nginx-lua (the bench key's hash, in a
// file it writes) or nginx-lua-keys (the N keys of -keys); nil when
// nginx's Lua module is not installed.
func (b *bench) nginxLua(name string) (*luaConf, error) {
	if !luaInstalled() {
		return nil, nil
	}
	if isManyKeys(name) {
		return &luaConf{Modules: nginxModules, Path: luaPath, KeysFile: b.keys.luaFile}, nil
	}
	keys := filepath.Join(b.dir, "nginx-lua-keys.txt")
	one := []keystore.Record{{ID: b.keyID, Hash: keystore.HashKey(b.key)}}
	if err := os.WriteFile(keys, nginxLuaKeys(one), 0o600); err != nil {
		return nil, err
	}
	return &luaConf{Modules: nginxModules, Path: luaPath, KeysFile: keys}, nil
}

// nginxLuaKeys is nginx-lua's file of keys: "<hex sha256> <key id>" lines.
func nginxLuaKeys(recs []keystore.Record) []byte {
	var buf bytes.Buffer
	for _, r := range recs {
		buf.WriteString(hex.EncodeToString(r.Hash[:]))
		buf.WriteByte(' ')
		buf.WriteString(r.ID)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}
