package redact_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/redact"
)

const (
	key    = "svc_live_4f9Qk2ZpR7xT1mWcB8nLd3HsVy6Ja0EuKg5rNo"
	random = "4f9Qk2ZpR7xT1mWcB8nLd3HsVy6Ja0EuKg5rNo"
	jwt    = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
)

type stringer string

func (s stringer) String() string { return string(s) }

func TestCoreRedactsEveryField(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	log := zap.New(redact.Core(zapcore.NewCore(enc, zapcore.AddSync(&buf), zap.DebugLevel)))
	u, _ := url.Parse("https://x/registry/" + key)
	log = log.With(zap.String("with", key)).Named("access")
	log.Info("request "+key,
		zap.String("path", "/registry/"+key),
		zap.String("method", key),
		zap.ByteString("raw", []byte("Bearer "+jwt)),
		zap.Error(fmt.Errorf("upstream: %w", errors.New("bad key "+key))),
		zap.Stringer("url", u),
		zap.Stringer("s", stringer("Authorization: Bearer tok123")),
		zap.Strings("list", []string{"a", key}),
		zap.Any("map", map[string]string{"k": jwt}),
		zap.Int("status", 401),
	)
	log.Sugar().Infof("sugared %s", key)
	zap.NewStdLog(log).Printf("http: error for %s", key)
	out := buf.String()
	for _, s := range []string{random, jwt, "tok123", "4f9Qk2"} {
		if strings.Contains(out, s) {
			t.Errorf("log holds %q:\n%s", s, out)
		}
	}
	if !strings.Contains(out, `"status":401`) || !strings.Contains(out, "svc_live_[REDACTED]") {
		t.Errorf("log lost its fields:\n%s", out)
	}
}

func TestCoreIsIdempotent(t *testing.T) {
	c := redact.Core(zapcore.NewNopCore())
	if redact.Core(c) != c {
		t.Error("Core wrapped a redacting core again")
	}
}

func TestFieldsWithoutSecretsIsTheSameSlice(t *testing.T) {
	fs := []zapcore.Field{zap.String("a", "b"), zap.Int("n", 1), zap.Error(errors.New("x"))}
	if got := redact.Fields(fs); &got[0] != &fs[0] {
		t.Error("Fields copied a slice with nothing to redact")
	}
}

// BenchmarkCoreAccessLine is the cost of redaction on an access log line
// with nothing to redact, against the same logger without it.
func BenchmarkCoreAccessLine(b *testing.B) {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	for _, bc := range []struct {
		name string
		wrap func(zapcore.Core) zapcore.Core
	}{{"plain", func(c zapcore.Core) zapcore.Core { return c }}, {"redacting", redact.Core}} {
		b.Run(bc.name, func(b *testing.B) {
			log := zap.New(bc.wrap(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zap.InfoLevel))).Named("access")
			b.ReportAllocs()
			for b.Loop() {
				log.Info("request",
					zap.String("trace_id", "0af7651916cd43dd8448eb211c80319c"),
					zap.String("method", "POST"),
					zap.String("path", "/sync"),
					zap.String("route", "sync"),
					zap.Int("status", 200),
					zap.Int64("bytes_in", 65536),
					zap.Int64("bytes_out", 1213),
					zap.Duration("latency", 2e6),
					zap.String("remote", "127.0.0.1:44840"),
					zap.String("key_id", "key_6792987a0c5931a5"),
					zap.String("auth", "api_key"),
					zap.String("product", "extraction"),
					zap.String("env", "live"),
					zap.String("upstream", "extraction"))
			}
		})
	}
}
