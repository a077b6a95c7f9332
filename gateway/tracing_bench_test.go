package gateway_test

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/tracing"
)

// discard is a span exporter that drops what it gets: the benchmark
// measures the request path's span work, not an exporter's network.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkRequestPathTraced is BenchmarkRequestPath with tracing on, the
// server span started by the listener's tracing handler as in a running
// keygate, at sample ratios 0.01 and 1. (Off, it is BenchmarkRequestPath.)
func BenchmarkRequestPathTraced(b *testing.B) {
	for _, c := range []struct {
		name  string
		ratio float64
	}{{"ratio0.01", 0.01}, {"ratio1", 1}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := tracing.DefaultConfig()
			cfg.Enabled, cfg.Endpoint, cfg.SampleRatio = true, "http://127.0.0.1:4317", c.ratio
			tp, err := tracing.New(context.Background(), cfg, tracing.Deps{Exporter: discard{}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			gw, key := benchGatewayWith(b, func(_ *gateway.Config, d *gateway.Deps) { d.Tracer = tp.Tracer() })
			benchSyncHandler(b, tp.Handler("api", gw), key)
		})
	}
}

// benchSyncHandler is benchSync (a 16 KiB /sync upload) through h.
func benchSyncHandler(b *testing.B, h http.Handler, key string) {
	benchSyncFile(b, h, key, 16<<10)
}
