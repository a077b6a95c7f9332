package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/testsupport/keystoretest"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
	"github.com/keygate/keygate/usage"
)

// benchGateway is the request path with its real collaborators (file
// keystore, local limiter) in front of an upstream that discards the body.
func benchGateway(b *testing.B) (*gateway.Gateway, string) {
	return benchGatewayWith(b, nil)
}

type (
	gatewayConfig = gateway.Config
	gatewayDeps   = gateway.Deps
)

// benchGatewayWith is benchGateway with mod applied to its config and deps.
func benchGatewayWith(b *testing.B, mod func(*gateway.Config, *gateway.Deps)) (*gateway.Gateway, string) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
	}))
	b.Cleanup(up.Close)
	path := filepath.Join(b.TempDir(), "keys.yaml")
	admin := &keystore.FileAdmin{Path: path}
	key, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	if err != nil {
		b.Fatal(err)
	}
	store := keystoretest.OpenFile(b, path)
	keys, _ := auth.NewAPIKeys(auth.APIKeysConfig{Store: store})
	cfg := gateway.Config{
		Upstreams:    gateway.UpstreamsConfig{Extraction: gateway.UpstreamConfig{Targets: []string{up.URL}}, Registry: gateway.UpstreamConfig{Targets: []string{up.URL}}},
		MaxBodyBytes: 100 << 20,
		Limits: map[string]policy.Limit{
			"live": {Rate: 1e6, Per: time.Second, Burst: 1e9}, // the largest allowed
			"test": {Rate: 1e6, Per: time.Second, Burst: 1e9},
		},
	}
	deps := gateway.Deps{Auth: keys, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{}), Usage: usage.NewCounters(0)}
	if mod != nil {
		mod(&cfg, &deps)
	}
	gw, err := gateway.New(cfg, deps)
	if err != nil {
		b.Fatal(err)
	}
	return gw, key
}

// BenchmarkRequestPath is one accepted /sync upload (context first, 16 KiB
// file) through ServeHTTP: key check, limiter, context binding, proxy.
func BenchmarkRequestPath(b *testing.B) {
	gw, key := benchGateway(b)
	benchSync(b, gw, key)
}

// BenchmarkRequestPathSizes is BenchmarkRequestPath with the file sizes
// of make bench-peers: a tiny body (held in memory of its own and sent
// with its headers in one write) and a 100 KiB one (held in a pooled
// buffer).
func BenchmarkRequestPathSizes(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"256B", 256}, {"100KiB", 100 << 10}} {
		b.Run(c.name, func(b *testing.B) {
			gw, key := benchGateway(b)
			benchSyncFile(b, gw, key, c.size)
		})
	}
}

// BenchmarkRequestPathVsBare runs the same /sync uploads through keygate
// and through a tuned bare httputil.ReverseProxy (pooled copy buffers,
// keygate's idle pool, no gzip asked: bench/peers' baseline), each in
// front of the same kind of upstream, so that one run gives what
// keygate's checks cost over proxying alone, per request and in
// allocations.
func BenchmarkRequestPathVsBare(b *testing.B) {
	for _, size := range []int{256, 100 << 10} {
		b.Run(fmt.Sprintf("bare/%d", size), func(b *testing.B) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(200)
			}))
			defer up.Close()
			u, _ := url.Parse(up.URL)
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.DisableCompression = gateway.DefaultMaxIdleConnsPerHost, gateway.DefaultMaxIdleConnsPerHost, true
			defer tr.CloseIdleConnections()
			bare := &httputil.ReverseProxy{
				Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
				Transport:  tr,
				BufferPool: benchBufferPool{},
			}
			benchSyncFile(b, bare, "svc_live_unchecked", size)
		})
		b.Run(fmt.Sprintf("keygate/%d", size), func(b *testing.B) {
			gw, key := benchGateway(b)
			benchSyncFile(b, gw, key, size)
		})
	}
}

type benchBufferPool struct{}

var benchBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (benchBufferPool) Get() []byte  { return *benchBuffers.Get().(*[]byte) }
func (benchBufferPool) Put(b []byte) { benchBuffers.Put(&b) }

// benchSync measures accepted /sync uploads of a 16 KiB file through gw;
// check, if any, looks at the first response too.
func benchSync(b *testing.B, gw *gateway.Gateway, key string, check ...func(*httptest.ResponseRecorder)) {
	benchSyncFile(b, gw, key, 16<<10, check...)
}

// benchSyncFile is benchSync with a file of size bytes, through any
// handler that fronts a gateway.
func benchSyncFile(b *testing.B, gw http.Handler, key string, size int, check ...func(*httptest.ResponseRecorder)) {
	ct, body := form(b, part{"contextId", ctxA}, part{"id", "1"}, part{"files", string(bytes.Repeat([]byte("x"), size))})
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/sync", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if i == 0 {
			for _, c := range check {
				c(w)
			}
		}
	}
}

// BenchmarkRefusedKey is the 401 path for a well-formed but unknown key:
// what a flood of made-up keys costs.
func BenchmarkRefusedKey(b *testing.B) {
	gw, _ := benchGateway(b)
	unknown, _ := keystore.Generate(keystore.Live)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/sync", http.NoBody)
		req.Header.Set("X-Api-Key", unknown)
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, req)
		if w.Code != 401 {
			b.Fatalf("status %d", w.Code)
		}
	}
}
