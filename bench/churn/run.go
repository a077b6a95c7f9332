package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/keystore"
)

// Options are the bench's knobs (see the flags in main.go).
type Options struct {
	Rate     int
	Keys     int
	Reps     int
	Duration time.Duration
	OpenRate int
	Size     int
	Limiter  string
	Admin    string
	// Load is whom the load goes to: "1" (replica 1) or "both" (spread
	// evenly, as a load balancer in front of a fleet spreads it).
	Load string
	// Audit is the replicas' audit.file: "file" (one JSON-lines file,
	// fsync'ed per event) or "none" (the Redis stream alone, as the
	// Kubernetes manifests have it).
	Audit      string
	KeygateBin string
	Profile    string
	Smoke      bool
	Keep       bool
	Lifetime   time.Duration
	ProbeEvery time.Duration
	// CPUs is the machine's core count, for the churn's share of it
	// (0: runtime.NumCPU()).
	CPUs int
}

const benchContext = "3f2b8c1e-6a4d-4e8b-9c2a-7d5e1f0a9b34"

// replica is one keygate process.
type replica struct {
	name  string
	addr  string // the API listener
	admin string // the admin API listener
	ops   string // admin_listen: /readyz
	cmd   *exec.Cmd
}

// bench holds what a run started, to stop it at the end.
type bench struct {
	o        Options
	dir      string
	self     string
	stderr   io.Writer
	procs    []*exec.Cmd
	bin      string
	redis    *exec.Cmd
	redisAdr string
	upstream string
	replicas []*replica
	key      string // the load key
	token    string // the admin token (keys:read, keys:write)
}

// Run starts everything, measures the phases, and prints the tables.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if o.Smoke {
		o.Keys, o.Duration, o.Reps, o.OpenRate = 1000, 3*time.Second, 1, 500
	}
	if o.Reps < 1 {
		o.Reps = 1
	}
	if o.CPUs < 1 {
		o.CPUs = runtime.NumCPU()
	}
	if o.Rate < 2 {
		return errors.New("-rate: want at least 2 changes a second (one issue, one revocation)")
	}
	if o.Admin != "both" && o.Admin != "1" && o.Admin != "2" {
		return fmt.Errorf("-admin: want both, 1 or 2, got %q", o.Admin)
	}
	if o.Load != "both" && o.Load != "1" {
		return fmt.Errorf("-load: want both or 1, got %q", o.Load)
	}
	if o.Audit != "file" && o.Audit != "none" {
		return fmt.Errorf("-audit: want file or none, got %q", o.Audit)
	}
	if o.Limiter != "redis" && o.Limiter != "local" {
		return fmt.Errorf("-limiter: want redis or local, got %q", o.Limiter)
	}
	if o.Profile != "" {
		p, err := filepath.Abs(o.Profile)
		if err != nil {
			return err
		}
		o.Profile = p
	}
	dir, err := os.MkdirTemp("", "keygate-churn-")
	if err != nil {
		return err
	}
	if o.Keep {
		fmt.Fprintf(stderr, "bench-churn: logs and configs in %s (kept)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b := &bench{o: o, dir: dir, self: self, stderr: stderr}
	defer b.stopAll()
	if err := b.startAll(ctx); err != nil {
		return err
	}
	res, err := b.measure(ctx)
	if err != nil {
		return err
	}
	printTables(stdout, o, res)
	return nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.stderr, "bench-churn: "+format+"\n", args...)
}

// start runs a process with its output in dir/name.log.
func (b *bench) start(name string, env []string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(b.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = b.dir
	cmd.Env = append(append(os.Environ(), "HOME="+b.dir, "XDG_DATA_HOME="+b.dir, "XDG_CONFIG_HOME="+b.dir), env...)
	// Its own process group, so that stop reaches its children; killed
	// with the bench should the bench die first, rather than left serving.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.procs = append(b.procs, cmd)
	return cmd, nil
}

func (b *bench) stopAll() {
	for i := len(b.procs) - 1; i >= 0; i-- {
		benchproc.Stop(b.procs[i])
	}
	b.procs = nil
}

func (b *bench) forget(c *exec.Cmd) {
	b.procs = slices.DeleteFunc(b.procs, func(x *exec.Cmd) bool { return x == c })
}

func (b *bench) logTail(name string) string {
	logs, _ := os.ReadFile(filepath.Join(b.dir, name+".log"))
	if len(logs) > 2000 {
		logs = logs[len(logs)-2000:]
	}
	return string(logs)
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

func (b *bench) startRedis() error {
	exe := benchproc.LookPath("redis-server")
	if exe == "" {
		return errors.New("redis-server is not installed: run make deps")
	}
	addr, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	c, err := b.start("redis", nil, exe, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", b.dir)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_, _ = conn.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if strings.HasPrefix(line, "+PONG") {
				b.redis, b.redisAdr = c, addr
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not start: %s", addr, b.logTail("redis"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fill writes n random records into the Redis keystore, as `keys import`
// does (pipelined batches of 1000), and announces them.
func (b *bench) fill(ctx context.Context, n int) error {
	c := redis.NewClient(&redis.Options{Addr: b.redisAdr})
	defer c.Close()
	a := &keystore.RedisAdmin{Client: c}
	contexts := make([]string, 1000)
	for i := range contexts {
		h := randomHex(16)
		contexts[i] = h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
	}
	start := time.Now()
	batch := make([]keystore.Record, 0, 1000)
	for i := range n {
		var h keystore.Hash
		_, _ = rand.Read(h[:])
		batch = append(batch, keystore.Record{
			ID: "key_" + randomHex(8), Name: "app " + strconv.Itoa(i%5000), Hash: h,
			Product: keystore.Extraction, Env: keystore.Live, Context: contexts[i%len(contexts)],
			CreatedAt: time.Now().UTC().Truncate(time.Second), Status: keystore.Active,
		})
		if len(batch) == cap(batch) || i == n-1 {
			if _, _, err := a.ImportBatch(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	b.logf("filled the Redis keystore with %d keys in %s", n, time.Since(start).Round(time.Millisecond))
	return a.AnnounceAll(ctx)
}

func randomHex(n int) string {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return hex.EncodeToString(p)
}

// config writes replica name's config and returns its path.
func (b *bench) config(r *replica) (string, error) {
	spool := filepath.Join(b.dir, r.name+"-spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return "", err
	}
	cfg := fmt.Sprintf(`server:
  listen: %q
  admin_listen: %q
  spool_dir: %q
  max_body_bytes: 104857600
tls:
  mode: "off"
upstreams:
  extraction: { targets: ["http://%s"] }
  registry: { targets: ["http://%s"] }
keystore: { backend: redis }
redis: { addrs: [%q] }
ratelimit:
  backend: %s
  max_concurrent: 0
  limits:
    live: { rate: 1000000, per: 1s, burst: 1000000000 }
    test: { rate: 1000000, per: 1s, burst: 1000000000 }
auth:
  # The driver's probes refuse revoked keys from the load's own address,
  # 50 a second: counted (one Redis call each with the Redis limiter) but
  # never throttled, as a monitoring address would be allowed.
  failure_limit: { enabled: true, rate: 1000000, per: 1s, burst: 1000000 }
admin_api: { enabled: true, listen: %q, tls: "off" }
audit: { file: %q }
log: { level: info, format: json }
`, r.addr, r.ops, spool, b.upstream, b.upstream, b.redisAdr, b.o.Limiter, r.admin, b.auditFile())
	p := filepath.Join(b.dir, r.name+".yaml")
	return p, os.WriteFile(p, []byte(cfg), 0o600)
}

// auditFile is the replicas' audit.file.
func (b *bench) auditFile() string {
	if b.o.Audit == "none" {
		return "none"
	}
	return filepath.Join(b.dir, "audit.jsonl")
}

// cli runs a keygate CLI command and returns its stdout.
func (b *bench) cli(args ...string) (string, error) {
	cmd := exec.Command(b.bin, args...)
	cmd.Dir = b.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("keygate %s: %w\n%s", args[0], err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// startAll starts redis-server, fills it, starts the upstream and the two
// replicas, and makes the load key and the admin token.
func (b *bench) startAll(ctx context.Context) error {
	if err := b.startRedis(); err != nil {
		return err
	}
	if err := b.fill(ctx, b.o.Keys); err != nil {
		return err
	}
	up, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	if _, err := b.start("upstream", nil, b.self, "-role", "upstream", "-listen", up); err != nil {
		return err
	}
	b.upstream = up
	if b.bin, err = b.buildKeygate(); err != nil {
		return err
	}
	for i := range 2 {
		r := &replica{name: fmt.Sprintf("replica%d", i+1)}
		for _, p := range []*string{&r.addr, &r.admin, &r.ops} {
			if *p, err = benchproc.FreeAddr(); err != nil {
				return err
			}
		}
		b.replicas = append(b.replicas, r)
	}
	cfgs := make([]string, 2)
	for i, r := range b.replicas {
		if cfgs[i], err = b.config(r); err != nil {
			return err
		}
	}
	if b.key, err = b.cli("keys", "issue", "--config", cfgs[0], "--product", "extraction", "--env", "live", "--context", benchContext, "--name", "load"); err != nil {
		return err
	}
	if b.token, err = b.cli("admin-tokens", "create", "--config", cfgs[0], "--name", "churn", "--scopes", "keys:read,keys:write"); err != nil {
		return err
	}
	for i, r := range b.replicas {
		args, env := []string{b.bin, "serve", "--config", cfgs[i]}, []string(nil)
		if b.o.Profile != "" {
			// The replica runs in a child of this binary, which profiles
			// it on a signal (see keygateRole).
			args = []string{b.self, "-role", "keygate", "serve", "--config", cfgs[i]}
			env = []string{"CHURN_PROFILE=" + b.profilePath(r)}
		}
		start := time.Now()
		if r.cmd, err = b.start(r.name, env, args...); err != nil {
			return err
		}
		if err := b.waitReady(r); err != nil {
			return err
		}
		b.logf("%s ready in %s (%d keys)", r.name, time.Since(start).Round(time.Millisecond), b.o.Keys+1)
	}
	return nil
}

// waitReady waits until r's /readyz is 200 (the first full pass of the
// keystore is done) and it answers the load request with 200.
func (b *bench) waitReady(r *replica) error {
	deadline := time.Now().Add(60 * time.Second)
	body := multipartBody(64)
	var last string
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + r.ops + "/readyz"); err != nil {
			last = err.Error()
		} else {
			rb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("/readyz %d: %s", resp.StatusCode, rb)
			if resp.StatusCode == http.StatusOK {
				req, _ := http.NewRequest(http.MethodPost, "http://"+r.addr+"/sync", bytes.NewReader(body))
				req.Header.Set("Content-Type", contentType)
				req.Header.Set("X-Api-Key", b.key)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					rb, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						return nil
					}
					last = fmt.Sprintf("/sync %d: %s", resp.StatusCode, rb)
				} else {
					last = err.Error()
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s never became ready (%s); its log:\n%s", r.name, last, b.logTail(r.name))
}
