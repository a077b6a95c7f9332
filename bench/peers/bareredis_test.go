package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keygate/keygate/internal/testsupport/redistest"
)

// TestBareRedisHandler: bare-redis's handler, over a real redis-server
// and the bare proxy to a real upstream, proxies a request with a key
// that the limit allows, and refuses without reaching the upstream a
// request without a key (401), one past the limit (429) and one it cannot
// decide because Redis is down (503).
func TestBareRedisHandler(t *testing.T) {
	var hits atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append([]byte("upstream got: "), body...))
	}))
	defer upstream.Close()
	up := strings.TrimPrefix(upstream.URL, "http://")

	live := redistest.Start(t)
	down := redistest.Start(t)
	down.Kill()
	oneAnHour := redis_rate.Limit{Rate: 1, Burst: 1, Period: time.Hour}

	for _, tc := range []struct {
		name  string
		redis string
		limit redis_rate.Limit
		// header is the key's header name as sent on the wire ("" sends
		// no key); the request is sent len(want) times.
		header string
		want   []int
		// wantBody is in the last answer's body; hits is how many
		// requests reached the upstream.
		wantBody string
		hits     int64
	}{
		{"no key", live.Addr, bareRedisLimit, "", []int{401}, `{"StateText":"ERROR","Messages":["missing API key"]}`, 0},
		{"a key", live.Addr, bareRedisLimit, "X-Api-Key", []int{200, 200}, "upstream got: the body", 2},
		{"a key in lower case", live.Addr, bareRedisLimit, "x-api-key", []int{200}, "upstream got: the body", 1},
		{"past a burst of 1", live.Addr, oneAnHour, "X-Api-Key", []int{200, 429, 429}, `"Messages":["rate limit exceeded"]`, 1},
		{"redis-server stopped", down.Addr, bareRedisLimit, "X-Api-Key", []int{503}, `"Messages":["rate limiter unavailable"]`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			srv := httptest.NewServer(bareRedis(bareProxy(up, pool), tc.redis, tc.limit))
			defer srv.Close()
			key := "key-" + strconv.FormatInt(time.Now().UnixNano(), 36) // a bucket of its own
			var last []byte
			for i, want := range tc.want {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/sync", strings.NewReader("the body"))
				if tc.header != "" {
					req.Header[tc.header] = []string{key} // as is, not canonicalised
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				last, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("request %d: %d %s, want %d", i+1, resp.StatusCode, last, want)
				}
				if want == http.StatusTooManyRequests {
					if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 1 || ra > 3600 {
						t.Errorf("429 with Retry-After %q, want 1 to 3600 s", resp.Header.Get("Retry-After"))
					}
				}
				if want != http.StatusOK && resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("%d with Content-Type %q, want application/json", want, resp.Header.Get("Content-Type"))
				}
			}
			if !bytes.Contains(last, []byte(tc.wantBody)) {
				t.Errorf("last answer %q, want it to contain %q", last, tc.wantBody)
			}
			if got := hits.Load(); got != tc.hits {
				t.Errorf("the upstream saw %d requests, want %d", got, tc.hits)
			}
		})
	}
	// Each request with a key was decided by redis_rate's script in the
	// live redis-server: one EVALSHA each (the first, before the script
	// was loaded, answered NOSCRIPT and was sent again as EVAL).
	calls := live.Calls(t)
	t.Logf("redis-server calls: %v", calls)
	if calls["evalsha"] != 6 {
		t.Errorf("redis-server ran EVALSHA %d times, want once for each of the 6 requests with a key", calls["evalsha"])
	}
}

// TestSmokeBareRedis: in smoke mode bare-redis carries its load without
// an error and has a row in the Redis-limiter table with its
// redis-server's CPU per request, not zero: redis_rate decided every
// request there. (TestSmoke and TestSmokeTLS run it among every target,
// side by side and over TLS.)
func TestSmokeBareRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds keygate")
	}
	needTools(t, "wrk")
	// The roles without -race, so that bare-redis makes requests at a
	// rate whose redis-server CPU /proc's ticks can see.
	out, errb := runLogged(t, Options{Targets: "bare-redis", Sizes: "256", Smoke: true, RoleBin: buildRoles(t)}, 4*time.Minute)
	_, redisTable, ok := strings.Cut(out, "The Redis-limiter targets' redis-server")
	m := regexp.MustCompile(`\n\| bare-redis \| (\d+) \| (\d+) \| (\d+) \|`).FindStringSubmatch(redisTable)
	if !ok || m == nil {
		t.Fatalf("no bare-redis row in the Redis-limiter table:\n%s", out)
	}
	if m[2] == "0" {
		t.Errorf("bare-redis's redis-server spent no CPU: %s", m[0])
	}
	noFailedRequests(t, errb)
	var loaded int
	for _, line := range strings.Split(errb, "\n") {
		if strings.Contains(line, "bare-redis") && strings.Contains(line, "closed:") {
			loaded++
		}
	}
	if loaded == 0 {
		t.Error("bare-redis had no closed-loop run")
	}
}
