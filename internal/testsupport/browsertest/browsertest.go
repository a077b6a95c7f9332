// Package browsertest drives Debian's chromium headless from tests,
// through chromedp: real pages, real forms, real cookies. It trusts only
// the test certificates it is given (by their public keys), and saves
// screenshots as test artifacts.
package browsertest

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Option changes how the browser starts.
type Option func(*options)

type options struct {
	trust   []*x509.Certificate
	timeout time.Duration
}

// TrustCerts makes the browser accept these certificates (matched by
// their public keys) and no other untrusted one.
func TrustCerts(certs ...*x509.Certificate) Option {
	return func(o *options) { o.trust = append(o.trust, certs...) }
}

// Timeout bounds the whole browser session; default 90 s.
func Timeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Chromium is the browser's path: $CHROMIUM, or /usr/bin/chromium.
func Chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// New starts a headless chromium with a fresh profile and returns a
// context that drives it; it ends with the test. Without chromium the
// test fails and says how to install it.
func New(t testing.TB, opts ...Option) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a real chromium; skipped in -short mode (make test runs it)")
	}
	o := options{timeout: 90 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	path := Chromium()
	if _, err := exec.LookPath(path); err != nil {
		t.Fatalf("chromium not found at %s (run `make deps`, or set CHROMIUM): %v", path, err)
	}
	flags := append(chromedp.DefaultExecAllocatorOptions[:0:0], chromedp.DefaultExecAllocatorOptions[:]...)
	flags = append(flags,
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		// This machine's network is closed: without these, chromium
		// floods it with refused connections to Google's services.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication"),
	)
	if len(o.trust) > 0 {
		var spki []string
		for _, c := range o.trust {
			h := sha256.Sum256(c.RawSubjectPublicKeyInfo)
			spki = append(spki, base64.StdEncoding.EncodeToString(h[:]))
		}
		flags = append(flags, chromedp.Flag("ignore-certificate-errors-spki-list", strings.Join(spki, ",")))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), flags...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, o.timeout)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser now
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

var (
	shotMu sync.Mutex
	shotN  = map[string]int{}
	unsafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
)

// ArtifactsDir is where screenshots go: $KEYGATE_ARTIFACTS, or
// artifacts/ at the repository root.
func ArtifactsDir() string {
	if d := os.Getenv("KEYGATE_ARTIFACTS"); d != "" {
		return d
	}
	dir, _ := os.Getwd()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "artifacts")
		}
	}
	return filepath.Join(dir, "artifacts")
}

// Screenshot saves a full-page PNG of the current page as
// ArtifactsDir()/screenshots/<test>/<NN>-<name>.png and returns its path.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG (below, JPEG)
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	shotMu.Lock()
	shotN[t.Name()]++
	n := shotN[t.Name()]
	shotMu.Unlock()
	dir := filepath.Join(ArtifactsDir(), "screenshots", unsafe.ReplaceAllString(t.Name(), "_"))
	if n == 1 { // a fresh run replaces the screenshots of the last one
		_ = os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%02d-%s.png", n, unsafe.ReplaceAllString(name, "_")))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// Do runs chromedp steps and fails the test on an error, naming what was
// being done and where.
func Do(t testing.TB, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		url, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("%s (at %s): %v", what, url, err)
	}
}

// Get runs one chromedp action that returns a value, failing the test on
// an error.
func Get[T any](t testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		url, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("%s (at %s): %v", what, url, err)
	}
	return v
}

// Text is the visible text of the first element matching the CSS
// selector sel.
func Text(t testing.TB, ctx context.Context, sel string) string {
	t.Helper()
	return Get(t, ctx, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}
