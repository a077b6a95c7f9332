package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/ratelimit"
)

// TestClientGoneDuringLimiterIs499: a client that goes away while the
// Redis limiter is slow (a frozen redis-server, SIGSTOP) is logged as 499
// with reason client_gone, and no warning: the limiter did not fail, the
// client left. On HTTP/2 (a /sync upload) and HTTP/1.1 (a registry GET).
func TestClientGoneDuringLimiterIs499(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	// Far slower than the clients wait (clientWait), so that a loaded
	// machine cannot make the limiter's timeout come first: a call a
	// client left keeps its sender until then.
	const clientWait = time.Second
	rl, err := ratelimit.NewRedis(ratelimit.RedisConfig{Client: rs.Client(t), Timeout: 5 * clientWait})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	lim, err := ratelimit.NewResilient(rl, ratelimit.ResilientConfig{FailureMode: ratelimit.FailClosed, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{limiter: lim, logger: zap.New(core)})
	if r := e.sync(e.LiveKey, ctxA); r.Status != 200 {
		t.Fatalf("with Redis up: %d", r.Status)
	}
	// The HTTP/1.1 client, connected (TLS handshake done) while Redis is
	// up, so that the client's wait below is spent at the limiter.
	tr := e.Client.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	h1 := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	if r := testkit.Do(t, h1, e.request("GET", "/registry/schemas", e.RegistryKey, "", nil)); r.Status != 200 || r.Proto != 1 {
		t.Fatalf("with Redis up, HTTP/1.1: %d (HTTP/%d)", r.Status, r.Proto)
	}
	rs.Freeze()
	defer rs.Thaw()

	ct, body := syncForm(t, ctxA)
	reqs := []struct {
		name  string
		proto int
		req   func(ctx context.Context) *http.Request
	}{
		{"HTTP/2 /sync", 2, func(ctx context.Context) *http.Request {
			return e.request("POST", "/sync", e.LiveKey, ct, bytes.NewReader(body)).WithContext(ctx)
		}},
		{"HTTP/1.1 registry GET", 1, func(ctx context.Context) *http.Request {
			return e.request("GET", "/registry/schemas", e.RegistryKey, "", nil).WithContext(ctx)
		}},
	}
	for _, rq := range reqs {
		client := e.Client
		if rq.proto == 1 {
			client = h1
		}
		ctx, cancel := context.WithTimeout(context.Background(), clientWait)
		_, err := client.Do(rq.req(ctx))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: the request with a frozen Redis ended with %v, want the client's own deadline", rq.name, err)
		}
	}
	testkit.Eventually(t, testkit.HangCheck, "two access lines with 499", func() error {
		n := 0
		for _, l := range logs.FilterMessage("request").All() {
			if l.ContextMap()["status"] == int64(499) {
				n++
			}
		}
		return testkit.True(n == 2, "%d access lines with status 499", n)
	})
	for _, l := range logs.FilterMessage("request").All() {
		if l.ContextMap()["status"] != int64(499) {
			continue
		}
		if r := l.ContextMap()["reason"]; r != "client_gone" {
			t.Errorf("499 logged with reason %v, want client_gone", r)
		}
	}
	for _, l := range logs.All() {
		if l.Level >= zapcore.WarnLevel {
			t.Errorf("warning logged for a client that left: %s %v", l.Message, fmt.Sprint(l.ContextMap()))
		}
	}
}

// TestClientGoneDuringKeyLookupIs499: a client that goes away while the
// Redis keystore looks its key up (a frozen redis-server) is logged as
// 499 with reason client_gone, and no warning from the gateway.
func TestClientGoneDuringKeyLookupIs499(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	core, logs := observer.New(zapcore.DebugLevel)
	// The store's timeout is far beyond the client's wait, so that a
	// loaded machine cannot make it come first.
	const clientWait = time.Second
	store, err := keystore.OpenRedis(keystore.RedisConfig{Client: rs.Client(t), Timeout: 5 * clientWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	e := newEnv(t, envOpts{store: store, logger: zap.New(core)})
	// Connect (TLS handshake) while Redis is up, so that the client's
	// wait below is spent at the key lookup.
	warm, _ := keystore.Generate(keystore.Live)
	r := e.do(e.request("GET", "/registry/schemas", warm, "", nil))
	t.Logf("an unknown key with Redis up: %d", r.Status)
	rs.Freeze()
	defer rs.Thaw()
	unknown, _ := keystore.Generate(keystore.Live)
	ctx, cancel := context.WithTimeout(context.Background(), clientWait)
	defer cancel()
	req := e.request("GET", "/registry/schemas", unknown, "", nil).WithContext(ctx)
	if _, err := e.Client.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the request with a frozen Redis ended with %v, want the client's own deadline", err)
	}
	testkit.Eventually(t, testkit.HangCheck, "an access line with 499", func() error {
		for _, l := range logs.FilterMessage("request").All() {
			if f := l.ContextMap(); f["status"] == int64(499) {
				return testkit.True(f["reason"] == "client_gone", "reason %v", f["reason"])
			}
		}
		return errors.New("none yet")
	})
	for _, l := range logs.All() {
		if l.Level >= zapcore.WarnLevel {
			t.Errorf("warning logged for a client that left: %s %v", l.Message, fmt.Sprint(l.ContextMap()))
		}
	}
}
