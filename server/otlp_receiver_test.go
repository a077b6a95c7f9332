package server_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/tracing"
)

// The OTLP receiver of the tracing tests is the OpenTelemetry Collector's
// own (go.opentelemetry.io/collector/receiver/otlpreceiver), on a loopback
// port, over gRPC or HTTP, with a consumer that keeps what it receives.

// span is one received span, flattened for assertions.
type span struct {
	Trace, ID, Parent, Name, Kind, Status string
	Start, End                            time.Time
	Attrs, Resource                       map[string]string
}

// values are every attribute and resource value of s.
func (s span) values() []string {
	var out []string
	for _, m := range []map[string]string{s.Attrs, s.Resource} {
		for k, v := range m {
			out = append(out, k, v)
		}
	}
	return out
}

type otlpReceiver struct {
	// Endpoint is the receiver's URL for tracing.endpoint.
	Endpoint string
	mu       sync.Mutex
	got      []span
	headers  map[string][]string
}

func startOTLPReceiver(t *testing.T, protocol string) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{headers: map[string][]string{}}
	addr := testkit.FreeAddr(t)
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	switch protocol {
	case tracing.ProtocolGRPC:
		g := cfg.Protocols.GRPC.GetOrInsertDefault()
		g.NetAddr.Endpoint, g.IncludeMetadata = addr, true
		cfg.Protocols.HTTP = configoptional.None[otlpreceiver.HTTPConfig]()
	default:
		h := cfg.Protocols.HTTP.GetOrInsertDefault()
		h.ServerConfig.NetAddr.Endpoint, h.ServerConfig.IncludeMetadata = addr, true
		cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	}
	next, err := consumer.NewTraces(func(ctx context.Context, td ptrace.Traces) error {
		r.add(ctx, td)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rcv.Shutdown(context.Background()) })
	r.Endpoint = "http://" + addr
	return r
}

var kinds = map[ptrace.SpanKind]string{
	ptrace.SpanKindServer: "server", ptrace.SpanKindClient: "client", ptrace.SpanKindInternal: "internal",
	ptrace.SpanKindProducer: "producer", ptrace.SpanKindConsumer: "consumer",
}

func flatten(m pcommon.Map) map[string]string {
	out := map[string]string{}
	m.Range(func(k string, v pcommon.Value) bool {
		out[k] = v.AsString()
		return true
	})
	return out
}

func (r *otlpReceiver) add(ctx context.Context, td ptrace.Traces) {
	r.mu.Lock()
	defer r.mu.Unlock()
	info := client.FromContext(ctx)
	for k := range info.Metadata.Keys() {
		r.headers[http.CanonicalHeaderKey(k)] = info.Metadata.Get(k)
	}
	for _, rs := range td.ResourceSpans().All() {
		res := flatten(rs.Resource().Attributes())
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				r.got = append(r.got, span{
					Trace: s.TraceID().String(), ID: s.SpanID().String(), Parent: s.ParentSpanID().String(),
					Name: s.Name(), Kind: kinds[s.Kind()], Status: s.Status().Message(),
					Start: s.StartTimestamp().AsTime(), End: s.EndTimestamp().AsTime(),
					Attrs: flatten(s.Attributes()), Resource: res,
				})
			}
		}
	}
}

// spans are the spans received so far.
func (r *otlpReceiver) spans() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.got...)
}

// header is the first value of an export request's header (gRPC
// metadata or HTTP header).
func (r *otlpReceiver) header(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := r.headers[http.CanonicalHeaderKey(name)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// waitFor waits until the spans received satisfy done.
func (r *otlpReceiver) waitFor(t *testing.T, done func([]span) bool) []span {
	t.Helper()
	var ss []span
	testkit.Eventually(t, testkit.HangCheck, "spans at the receiver", func() error {
		ss = r.spans()
		return testkit.True(done(ss), "%d spans so far", len(ss))
	})
	return ss
}
