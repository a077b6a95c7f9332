package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/server"
	"github.com/keygate/keygate/standin"
	"github.com/keygate/keygate/tracing"
)

// TestTracesReachAnOTLPReceiver runs keygate with tracing on, over gRPC
// and over HTTP, against a real OTLP receiver (see otlp_receiver_test.go)
// and checks what an on-call engineer reads in the trace backend: one
// server span per request with its children (authentication, rate limit,
// context check, upstream round trip), the incoming traceparent
// continued, the upstream handed the upstream span's context, the body's
// TraceId and X-Trace-Id equal to the trace id, and no credential in any
// attribute.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	for _, protocol := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			rcv := startOTLPReceiver(t, protocol)
			h := newHarness(t, setup{mod: func(c *config.Config) {
				c.Tracing.Enabled, c.Tracing.Protocol, c.Tracing.Endpoint = true, protocol, rcv.Endpoint
				c.Tracing.Headers = map[string]string{"x-scope-orgid": "keygate-test"}
			}})
			const incomingTrace, incomingParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

			// 1. A forwarded /sync that continues the caller's trace.
			ct, body := syncForm(t, ctxA)
			req, _ := http.NewRequest(http.MethodPost, h.API+"/sync", bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("Traceparent", "00-"+incomingTrace+"-"+incomingParent+"-01")
			keyCred(h.LiveKey).apply(req)
			ok := h.do(req)
			if ok.Status != http.StatusOK {
				t.Fatalf("/sync: %d %s", ok.Status, ok.Body)
			}
			if got := ok.Header.Get("X-Trace-Id"); got != incomingTrace {
				t.Errorf("X-Trace-Id %q, want the incoming trace %q", got, incomingTrace)
			}
			var echo standin.Echo
			if err := json.Unmarshal(ok.Body, &echo); err != nil {
				t.Fatal(err)
			}

			// 2. A refusal (wrong context) in a trace keygate starts, and a
			// refusal of a key sent in the URL.
			bad := h.sync(keyCred(h.LiveKey), ctxB)
			assertError(t, bad, http.StatusForbidden, "Invalid Context")
			var badBody struct{ TraceId string }
			_ = json.Unmarshal(bad.Body, &badBody)
			inURL := h.get(h.API, "/sync?api_key="+h.LiveKey2, cred{})

			// Spans are batched: Shutdown exports what is left.
			if err := h.Server.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.waitFor(t, func(ss []span) bool { return len(serverSpans(ss)) >= 3 })

			// The forwarded request's tree.
			root := findServer(t, spans, incomingTrace)
			if root.Parent != incomingParent {
				t.Errorf("server span's parent %q, want the incoming traceparent's %q", root.Parent, incomingParent)
			}
			wantAttrs := map[string]string{"http.route": "sync", "http.response.status_code": "200", "keygate.key_id": h.LiveID,
				"keygate.listener": "api", "http.request.method": "POST", "keygate.auth.method": "api_key"}
			for k, v := range wantAttrs {
				if root.Attrs[k] != v {
					t.Errorf("server span %s = %q, want %q", k, root.Attrs[k], v)
				}
			}
			if root.Name != "POST sync" || root.Kind != "server" {
				t.Errorf("server span %q kind %s, want \"POST sync\" kind server", root.Name, root.Kind)
			}
			children := map[string]span{}
			for _, s := range spans {
				if s.Trace == incomingTrace && s.Parent == root.ID {
					children[s.Name] = s
				}
			}
			for _, name := range []string{"keygate.authenticate", "keygate.ratelimit", "keygate.context_check", "keygate.upstream"} {
				c, ok := children[name]
				if !ok {
					t.Errorf("no %s span under the server span; children: %v", name, names(children))
					continue
				}
				if !c.Start.Before(c.End.Add(time.Nanosecond)) || c.Start.Before(root.Start) || c.End.After(root.End) {
					t.Errorf("%s [%v, %v] is not within the server span [%v, %v]", name, c.Start, c.End, root.Start, root.End)
				}
			}
			up := children["keygate.upstream"]
			if up.Kind != "client" || up.Attrs["http.response.status_code"] != "200" || up.Attrs["keygate.upstream"] != "extraction" {
				t.Errorf("upstream span: kind %s, attrs %v", up.Kind, up.Attrs)
			}
			if want := "00-" + incomingTrace + "-" + up.ID + "-01"; echo.Forwarded["traceparent"] != want {
				t.Errorf("upstream got traceparent %q, want the upstream span's context %q", echo.Forwarded["traceparent"], want)
			}
			if children["keygate.context_check"].Attrs["keygate.outcome"] != "ok" {
				t.Errorf("context check outcome %v", children["keygate.context_check"].Attrs)
			}

			// The refusal: a new trace, its id in the body and header.
			refused := findServer(t, spans, badBody.TraceId)
			if badBody.TraceId != bad.Header.Get("X-Trace-Id") || refused.Parent != "" {
				t.Errorf("refusal: body TraceId %q, X-Trace-Id %q, span parent %q", badBody.TraceId, bad.Header.Get("X-Trace-Id"), refused.Parent)
			}
			if refused.Attrs["keygate.refusal.reason"] != "context" || refused.Attrs["http.response.status_code"] != "403" || refused.Attrs["keygate.key_id"] != h.LiveID {
				t.Errorf("refusal's server span attrs %v", refused.Attrs)
			}
			urlSpan := findServer(t, spans, inURL.Header.Get("X-Trace-Id"))
			if urlSpan.Attrs["keygate.refusal.reason"] != "credential_in_url" {
				t.Errorf("key-in-URL span attrs %v", urlSpan.Attrs)
			}

			// No credential anywhere: attributes, names, status messages,
			// resource.
			for _, s := range spans {
				for _, v := range append(s.values(), s.Name, s.Status) {
					for _, secret := range []string{h.LiveKey, h.LiveKey2, "svc_live_", "svc_test_"} {
						if strings.Contains(v, secret) {
							t.Errorf("span %q carries a credential: %q", s.Name, v)
						}
					}
				}
			}
			if got := rcv.header("x-scope-orgid"); got != "keygate-test" {
				t.Errorf("receiver saw x-scope-orgid %q, want the configured header", got)
			}
			if root.Resource["service.name"] != "keygate" {
				t.Errorf("resource %v", root.Resource)
			}
		})
	}
}

// TestTracingOffStartsNoSpanAndKeepsTraceIDs: with tracing off (the
// default) nothing is exported, and the trace id still follows the
// incoming traceparent.
func TestTracingOffKeepsTraceIDs(t *testing.T) {
	t.Parallel()
	rcv := startOTLPReceiver(t, tracing.ProtocolHTTP)
	h := newHarness(t, setup{})
	ct, body := syncForm(t, ctxA)
	req, _ := http.NewRequest(http.MethodPost, h.API+"/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	keyCred(h.LiveKey).apply(req)
	if r := h.do(req); r.Status != 200 || r.Header.Get("X-Trace-Id") != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("%d, X-Trace-Id %q", r.Status, r.Header.Get("X-Trace-Id"))
	}
	_ = h.Server.Shutdown(t.Context())
	if n := len(rcv.spans()); n != 0 {
		t.Errorf("%d spans exported with tracing off", n)
	}
}

// TestTracingConfigErrors: a bad tracing section is refused at load with
// the field named.
func TestTracingConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  tracing.Config
		want string
	}{
		{"no endpoint", tracing.Config{Enabled: true}, "tracing.endpoint"},
		{"not a URL", tracing.Config{Enabled: true, Endpoint: "collector:4317"}, "tracing.endpoint"},
		{"credentials in the URL", tracing.Config{Enabled: true, Endpoint: "https://user:pw@collector:4317"}, "tracing.endpoint: must not carry credentials"},
		{"protocol", tracing.Config{Enabled: true, Endpoint: "http://127.0.0.1:4317", Protocol: "thrift"}, "tracing.protocol"},
		{"ratio", tracing.Config{Enabled: true, Endpoint: "http://127.0.0.1:4317", SampleRatio: 1.5}, "tracing.sample_ratio"},
		{"header variable empty", tracing.Config{Enabled: true, Endpoint: "http://127.0.0.1:4317", HeadersEnv: map[string]string{"x-honeycomb-team": "KEYGATE_TEST_UNSET_VARIABLE"}}, "tracing.headers_env.x-honeycomb-team"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := config.Default()
			c.Tracing = tc.cfg
			err := c.Validate()
			if err == nil {
				_, err = newServerErr(t, c)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

func names(m map[string]span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func serverSpans(ss []span) []span {
	var out []span
	for _, s := range ss {
		if s.Kind == "server" {
			out = append(out, s)
		}
	}
	return out
}

func findServer(t *testing.T, ss []span, traceID string) span {
	t.Helper()
	for _, s := range ss {
		if s.Kind == "server" && s.Trace == traceID {
			return s
		}
	}
	t.Fatalf("no server span in trace %q among %d spans", traceID, len(ss))
	return span{}
}

// newServerErr builds a server from c, for its error; one that builds is
// shut down at the end of the test.
func newServerErr(t *testing.T, c config.Config) (*server.Server, error) {
	t.Helper()
	s, err := server.New(t.Context(), c, server.Deps{Getenv: func(string) string { return "" }})
	if s != nil {
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	}
	return s, err
}
