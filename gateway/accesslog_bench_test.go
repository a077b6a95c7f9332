package gateway_test

import (
	"io"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/internal/logline"

	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/redact"
)

// deployedLogger is a logger shaped like the one `keygate serve` builds
// (cli.newLogger): zap's production JSON encoder with ISO 8601 times,
// behind the redacting core, writing to w.
func deployedLogger(w io.Writer) *zap.Logger {
	core := zapcore.NewCore(zapcore.NewJSONEncoder(logline.EncoderConfig()), zapcore.AddSync(w), zapcore.InfoLevel)
	return zap.New(redact.Core(core)).Named("access")
}

// BenchmarkRequestPathLogged is BenchmarkRequestPathSizes with the access
// line written to io.Discard as deployed (JSON, redacting core), so that
// its cost shows in the request path's.
func BenchmarkRequestPathLogged(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"256B", 256}, {"100KiB", 100 << 10}} {
		b.Run(c.name, func(b *testing.B) {
			gw, key := benchGatewayWith(b, func(_ *gateway.Config, d *gateway.Deps) {
				d.Logger = deployedLogger(io.Discard)
			})
			benchSyncFile(b, gw, key, c.size)
		})
	}
}
