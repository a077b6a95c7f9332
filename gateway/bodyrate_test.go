package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/gateway"
)

// TestMinBodyRate: a body trickled at 1 B/s is cut with 408 once the
// grace period has passed, whether it trickles before the context field
// (nothing reaches the upstream) or while the rest streams upstream (the
// upstream's request is aborted, never complete); the connection is
// closed and the key's concurrency slot is free again. A client at
// 64 KiB/s is never cut. The rate is the default's; the grace is shortened
// to keep the test short.
func TestMinBodyRate(t *testing.T) {
	t.Parallel()
	rate := gateway.MinBodyRate{BytesPerSecond: config.Default().Server.MinBodyRate.BytesPerSecond, Grace: time.Second}
	file := strings.Repeat("x", 256<<10) // streamed, not read whole
	ctCtxFirst, ctxFirst := form(t, part{"contextId", ctxA}, part{"id", "1"}, part{"files", file})
	ctFileFirst, fileFirst := form(t, part{"files", file}, part{"id", "1"}, part{"contextId", ctxA})

	trickle := func(w io.Writer, b []byte, stop <-chan struct{}) {
		for _, c := range b {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if _, err := w.Write([]byte{c}); err != nil {
				return
			}
		}
	}
	cases := []struct {
		name      string
		ct        string
		body      []byte
		prefix    int  // sent at once, then 1 B/s
		reachesUp bool // the context field is in the prefix
	}{
		{"1 B/s before the context field", ctFileFirst, fileFirst, 0, false},
		{"1 B/s while streaming upstream", ctCtxFirst, ctxFirst, bytes.Index(ctxFirst, []byte(file[:100])) + 100, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := newRecordingUpstream()
			e := newEnv(t, envOpts{minRate: rate, concurrent: 1, extractionH: up})
			start := time.Now()
			w, wait := rawSync(t, e, e.LiveKey, c.ct, len(c.body), c.body[:c.prefix])
			stop := make(chan struct{})
			defer close(stop)
			go trickle(w, c.body[c.prefix:], stop)
			resp, b, err := wait()
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, http.StatusRequestTimeout, "too slowly")
			// Never before the grace; the upper bound is a hang check (the
			// figure is logged).
			took := time.Since(start)
			t.Logf("cut after %s with a grace of %s", took.Round(time.Millisecond), rate.Grace)
			if took < rate.Grace || took > testkit.HangCheck {
				t.Errorf("cut after %s; want after the grace of %s, and within the hang check of %s", took.Round(time.Millisecond), rate.Grace, testkit.HangCheck)
			}
			if !resp.Close {
				t.Error("the connection of a cut body is kept open")
			}
			if c.reachesUp {
				up.expectAborted(t)
			} else if n := up.requests.Load(); n != 0 {
				t.Errorf("the upstream received %d requests", n)
			}
			// The slot is free: the key's next request (cap 1) passes.
			if r := e.sync(e.LiveKey, ctxA); r.Status != 200 {
				t.Errorf("the key's next request got %d: its concurrency slot was not released", r.Status)
			}
		})
	}

	t.Run("1 B/s to the registry", func(t *testing.T) {
		t.Parallel()
		up := newRecordingUpstream()
		reg := httptest.NewServer(up)
		t.Cleanup(reg.Close)
		e := newEnv(t, envOpts{minRate: rate, registry: []string{reg.URL}})
		c := tlsDial(t, e.URL)
		defer c.Close()
		start := time.Now()
		fmt.Fprintf(c, "PUT /registry/schemas/a HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", e.RegistryKey)
		stop := make(chan struct{})
		defer close(stop)
		go trickle(c, bytes.Repeat([]byte(" "), 100), stop)
		_ = c.SetReadDeadline(start.Add(testkit.HangCheck))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		assertError(t, result{Status: resp.StatusCode, Header: resp.Header, Body: b}, http.StatusRequestTimeout, "too slowly")
		took := time.Since(start)
		t.Logf("cut after %s with a grace of %s", took.Round(time.Millisecond), rate.Grace)
		if took < rate.Grace {
			t.Errorf("cut after %s, before the grace of %s", took.Round(time.Millisecond), rate.Grace)
		}
		up.expectAborted(t)
	})
	t.Run("64 KiB/s is never cut", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOpts{minRate: rate})
		big := strings.Repeat("y", 192<<10) // 3 s at 64 KiB/s
		ct, body := form(t, part{"contextId", ctxA}, part{"id", "1"}, part{"files", big})
		w, wait := rawSync(t, e, e.LiveKey, ct, len(body), nil)
		const step = 8 << 10 // 8 KiB every 125 ms
		for i := 0; i < len(body); i += step {
			time.Sleep(125 * time.Millisecond)
			if _, err := w.Write(body[i:min(i+step, len(body))]); err != nil {
				t.Fatalf("writing the body: %v", err)
			}
		}
		resp, b, err := wait()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("64 KiB/s body: %v %v %s", err, resp, b)
		}
	})
}
