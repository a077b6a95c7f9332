// Package e2e drives the real keygate binary over loopback with real
// clients: Go's net/http, curl and Node's fetch.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/standin"
)

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here runs the built binary; `make check` is the
		// quick loop, `make test` runs them.
		fmt.Println("e2e: skipped in -short mode (make test runs it)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "keygate-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "keygate")
	build := exec.Command("go", "build", "-o", binary, "../cmd/keygate")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building keygate:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	ctxA = "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"
	ctxB = "0a9b8c7d-6e5f-4a3b-9c2d-1e0f2a3b4c5d"
)

// gateway is one running keygate process.
type gateway struct {
	t        *testing.T
	dir      string
	cfgPath  string
	cmd      *exec.Cmd
	logs     *testkit.SyncBuffer
	API      string // https://127.0.0.1:port
	Admin    string // http://127.0.0.1:port
	Client   *http.Client
	Upstream *httptest.Server
	exited   chan error
	env      []string
	cgroup   string
}

type gwOpts struct {
	extra      string // appended YAML
	upstream   http.Handler
	maxBody    int64
	drain      time.Duration
	skipStart  bool
	keystore   string
	limitsYAML string
	// serverYAML is more lines of the server section ("  key: value\n").
	serverYAML string
	// authYAML replaces the auth section; empty means a failure limit
	// far above what any test sends, so that only the tests of the limit
	// (limits_test.go) meet it.
	authYAML string
	// maxConcurrent is ratelimit.max_concurrent; zero means 1000, far
	// above what any test sends.
	maxConcurrent int
	// upstreamConnState, when set, watches the extraction stand-in's
	// connections.
	upstreamConnState func(net.Conn, http.ConnState)
	// registry, when set, is the registry upstream; nil means a stand-in.
	registry http.Handler
	// env is more of keygate's environment ("NAME=value").
	env []string
	// cgroup, when set, is a cgroup directory that keygate runs in from
	// its first instruction on (see memlimit_test.go).
	cgroup string
}

// startGateway writes a config for a fresh keystore and stand-in upstreams,
// starts the binary and waits until /readyz answers 200.
func startGateway(t *testing.T, o gwOpts) *gateway {
	t.Helper()
	g := &gateway{t: t, dir: t.TempDir(), logs: &testkit.SyncBuffer{}, exited: make(chan error, 1), env: o.env, cgroup: o.cgroup}
	h := o.upstream
	if h == nil {
		h = standin.Handler{Name: "extraction"}
	}
	g.Upstream = httptest.NewUnstartedServer(h)
	g.Upstream.Config.ConnState = o.upstreamConnState
	g.Upstream.Start()
	t.Cleanup(g.Upstream.Close)
	var rh http.Handler = standin.Handler{Name: "registry"}
	if o.registry != nil {
		rh = o.registry
	}
	reg := httptest.NewServer(rh)
	t.Cleanup(reg.Close)
	if o.maxBody == 0 {
		o.maxBody = 100 << 20
	}
	if o.drain == 0 {
		o.drain = 30 * time.Second
	}
	ks := o.keystore
	if ks == "" {
		ks = filepath.Join(g.dir, "keys.yaml")
	}
	if o.authYAML == "" {
		o.authYAML = "auth:\n  failure_limit: { enabled: true, rate: 100000, per: 1s, burst: 100000 }\n"
	}
	if o.maxConcurrent == 0 {
		o.maxConcurrent = 1000
	}
	limits := o.limitsYAML
	if limits == "" {
		limits = `    live: { rate: 1000, per: 1s, burst: 1000 }
    test: { rate: 1000, per: 1s, burst: 1000, quota: { requests: 100000, per: 24h } }`
	}
	api, admin := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := fmt.Sprintf(`server:
  listen: %q
  admin_listen: %q
  max_body_bytes: %d
  drain_timeout: %s
  spool_dir: %q
%stls:
  mode: self_signed
  self_signed_dir: %q
upstreams:
  extraction: { targets: [%q] }
  registry: { targets: [%q] }
keystore:
  backend: file
  file: %q
ratelimit:
  backend: local
  max_concurrent: %d
  limits:
%s
%slog:
  level: info
%s`, api, admin, o.maxBody, o.drain, g.dir, o.serverYAML, filepath.Join(g.dir, "tls"), g.Upstream.URL, reg.URL, ks, o.maxConcurrent, limits, o.authYAML, o.extra)
	g.cfgPath = filepath.Join(g.dir, "keygate.yaml")
	if err := os.WriteFile(g.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g.API, g.Admin = "https://"+api, "http://"+admin
	g.Client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // the self-signed cert is checked in package tlsconf
		ForceAttemptHTTP2: true,
	}}
	t.Cleanup(g.Client.CloseIdleConnections)
	if !o.skipStart {
		g.start()
	}
	return g
}

func (g *gateway) start() {
	g.t.Helper()
	for attempt := 1; ; attempt++ {
		err := g.tryStart()
		if err == nil {
			return
		}
		// Ports are picked by binding and releasing them; another listener
		// can take one before keygate binds it. That is the test's race,
		// not keygate's failure: pick new ports and start again.
		if attempt < 4 && strings.Contains(g.logs.String(), "address already in use") {
			g.t.Logf("port taken before keygate bound it (attempt %d); retrying with new ports", attempt)
			api, admin := testkit.FreeAddr(g.t), testkit.FreeAddr(g.t)
			oldAPI, oldAdmin := strings.TrimPrefix(g.API, "https://"), strings.TrimPrefix(g.Admin, "http://")
			g.rewriteConfig(func(c string) string {
				return strings.Replace(strings.Replace(c, oldAPI, api, 1), oldAdmin, admin, 1)
			})
			g.API, g.Admin = "https://"+api, "http://"+admin
			g.logs = &testkit.SyncBuffer{}
			g.exited = make(chan error, 1)
			continue
		}
		g.t.Fatalf("%v\n%s", err, g.logs.String())
	}
}

// tryStart starts the binary and waits until /readyz answers 200.
func (g *gateway) tryStart() error {
	g.cmd = exec.Command(binary, "serve", "--config", g.cfgPath)
	if g.cgroup != "" {
		// The shell joins the cgroup and then becomes keygate.
		g.cmd = exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, g.cgroup, binary, "serve", "--config", g.cfgPath)
	}
	if g.env != nil {
		g.cmd.Env = append(os.Environ(), g.env...)
	}
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	g.cmd.Dir = g.dir
	if err := g.cmd.Start(); err != nil {
		return err
	}
	cmd, logs := g.cmd, g.logs
	exited := g.exited
	go func() { exited <- cmd.Wait() }()
	g.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if g.t.Failed() {
			g.t.Logf("keygate logs:\n%s", tail(logs.String(), 4000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("keygate exited at start: %w", err)
		default:
		}
		resp, err := http.Get(g.Admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("keygate not ready within 30s")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// keygate runs a CLI command of the binary against this gateway's config.
func (g *gateway) keygate(args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	full := append([]string{}, args...)
	full = append(full, "--config", g.cfgPath)
	cmd := exec.Command(binary, full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Dir = g.dir
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// issue runs `keys issue` and returns the key from stdout's first line and
// the record id from the list.
func (g *gateway) issue(args ...string) string {
	g.t.Helper()
	out, errOut, err := g.keygate(append([]string{"keys", "issue"}, args...)...)
	if err != nil {
		g.t.Fatalf("keys issue: %v\n%s", err, errOut)
	}
	return strings.SplitN(out, "\n", 2)[0]
}

type record struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Product   string  `json:"product"`
	Env       string  `json:"env"`
	Context   string  `json:"context"`
	Status    string  `json:"status"`
	CreatedAt string  `json:"created_at"`
	ExpiresAt *string `json:"expires_at"`
}

func (g *gateway) list() []record {
	g.t.Helper()
	out, errOut, err := g.keygate("keys", "list", "--json")
	if err != nil {
		g.t.Fatalf("keys list: %v\n%s", err, errOut)
	}
	var recs []record
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		g.t.Fatalf("keys list --json: %v\n%s", err, out)
	}
	return recs
}

// post sends a /sync upload and returns status and body.
func (g *gateway) post(key, contextID string, file []byte) (int, []byte, http.Header) {
	g.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("id", "2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a")
	_ = mw.WriteField("contextId", contextID)
	w, _ := mw.CreateFormFile("files", "doc.pdf")
	_, _ = w.Write(file)
	_ = mw.Close()
	req, _ := http.NewRequest("POST", g.API+"/sync", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		g.t.Fatalf("POST /sync: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// eventually polls f until it returns "" or within passes.
func eventually(t *testing.T, within time.Duration, f func() string) {
	t.Helper()
	testkit.Eventually(t, within, "condition", func() error {
		if msg := f(); msg != "" {
			return errors.New(msg)
		}
		return nil
	})
}

func (g *gateway) signal(sig syscall.Signal) {
	_ = g.cmd.Process.Signal(sig)
}

func (g *gateway) wait(within time.Duration) error {
	select {
	case err := <-g.exited:
		return err
	case <-time.After(within):
		return context.DeadlineExceeded
	}
}

// rewriteConfig edits the config file before start.
func (g *gateway) rewriteConfig(f func(string) string) {
	g.t.Helper()
	b, err := os.ReadFile(g.cfgPath)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(g.cfgPath, []byte(f(string(b))), 0o600); err != nil {
		g.t.Fatal(err)
	}
}
