package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/server"
	"github.com/keygate/keygate/standin"
)

// BenchmarkGatewayThroughput is the whole-gateway load harness. In one run
// it sends the same /sync uploads, over TLS on loopback, through:
//
//   - a bare httputil.ReverseProxy (the baseline: what any Go proxy costs),
//   - keygate with the local limiter,
//   - keygate with the Redis limiter (a real redis-server),
//
// interleaved in rounds so that machine noise hits all three alike, and
// reports each throughput as a ratio: keygate-local/baseline and
// redis/local. Absolute req/s are reported too, but only the ratios mean
// anything on a shared machine.
func BenchmarkGatewayThroughput(b *testing.B) {
	up := httptest.NewServer(standin.Handler{Name: "extraction"})
	defer up.Close()
	target, _ := url.Parse(up.URL)
	// The baseline proxy gets the same upstream pool as keygate's, so the
	// ratio measures keygate's work, not a smaller connection pool.
	bare := httputil.NewSingleHostReverseProxy(target)
	bare.Transport = &http.Transport{MaxIdleConnsPerHost: gateway.DefaultMaxIdleConnsPerHost, ForceAttemptHTTP2: true, IdleConnTimeout: 90 * time.Second}
	baseline := httptest.NewUnstartedServer(bare)
	baseline.StartTLS()
	defer baseline.Close()

	rs := redistest.Start(b)
	local, localKey := benchServer(b, up.URL, "local", rs.Addr)
	redisGW, redisKey := benchServer(b, up.URL, "redis", rs.Addr)

	ct, body := testkit.Form(b, testkit.Part{Name: "contextId", Value: ctxA}, testkit.Part{Name: "id", Value: "2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a"}, testkit.Part{Name: "files", Value: strings.Repeat("%PDF-1.7 benchmark page\n", 400)})
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		MaxIdleConnsPerHost: gateway.DefaultMaxIdleConnsPerHost,
	}}
	defer client.CloseIdleConnections()
	run := func(base, key string, n int) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) {
					req, _ := http.NewRequest("POST", base+"/sync", bytes.NewReader(body))
					req.Header.Set("Content-Type", ct)
					if key != "" {
						req.Header.Set("X-Api-Key", key)
					}
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d from %s", resp.StatusCode, base)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	// Warm up connections and caches outside the measurement.
	run(baseline.URL, "", 64)
	run(local, localKey, 64)
	run(redisGW, redisKey, 64)

	const rounds = 4
	var tBase, tLocal, tRedis time.Duration
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		n := max(b.N/rounds, 1)
		tBase += run(baseline.URL, "", n)
		tLocal += run(local, localKey, n)
		tRedis += run(redisGW, redisKey, n)
	}
	b.StopTimer()
	n := float64(max(b.N/rounds, 1) * rounds)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	b.ReportMetric(rate(tBase), "baseline-req/s")
	b.ReportMetric(rate(tLocal), "local-req/s")
	b.ReportMetric(rate(tRedis), "redis-req/s")
	b.ReportMetric(rate(tLocal)/rate(tBase), "local/baseline")
	b.ReportMetric(rate(tRedis)/rate(tLocal), "redis/local")
}

// benchServer starts keygate with the given limiter backend and limits too
// high to refuse anything, and returns its URL and a key.
func benchServer(b *testing.B, upstream, backend, redisAddr string) (string, string) {
	b.Helper()
	dir := b.TempDir()
	admin := &keystore.FileAdmin{Path: filepath.Join(dir, "keys.yaml")}
	key, _, err := admin.Issue(context.Background(), keystore.IssueRequest{Product: keystore.Extraction, Env: keystore.Live, Context: ctxA})
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.AdminListen = "127.0.0.1:0"
	cfg.Server.SpoolDir = dir
	cfg.TLS.SelfSignedDir = filepath.Join(dir, "tls")
	cfg.Upstreams.Extraction.Targets = []string{upstream}
	cfg.Upstreams.Registry.Targets = []string{upstream}
	cfg.Keystore.File = admin.Path
	cfg.RateLimit.Backend = backend
	cfg.Redis.Addrs = []string{redisAddr}
	cfg.RateLimit.Limits = map[string]policy.Limit{
		"live": {Rate: 1e6, Per: time.Second, Burst: 1e9}, // the largest allowed
		"test": {Rate: 1e6, Per: time.Second, Burst: 1e9},
	}
	// Access logs on, as in production, written to nowhere.
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	srv, err := server.New(context.Background(), cfg, server.Deps{Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "https://" + srv.APIAddr().String(), key
}
