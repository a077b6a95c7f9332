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
// with nothing to redact, against the same logger without it, and with
// the gateway's own values (redact.Verbatim) left unscanned.
func BenchmarkCoreAccessLine(b *testing.B) {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	for _, bc := range []struct {
		name string
		wrap func(zapcore.Core) zapcore.Core
		own  func(key, val string) zap.Field // the gateway's own values
	}{
		{"plain", func(c zapcore.Core) zapcore.Core { return c }, zap.String},
		{"redacting", redact.Core, zap.String},
		{"redacting-verbatim", redact.Core, redact.Verbatim},
	} {
		b.Run(bc.name, func(b *testing.B) {
			log := zap.New(bc.wrap(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zap.InfoLevel))).Named("access")
			b.ReportAllocs()
			for b.Loop() {
				log.Info("request",
					bc.own("trace_id", "0af7651916cd43dd8448eb211c80319c"),
					bc.own("method", "POST"),
					zap.String("path", "/sync"),
					bc.own("route", "sync"),
					zap.Int("status", 200),
					zap.Int64("bytes_in", 65536),
					zap.Int64("bytes_out", 1213),
					zap.Duration("latency", 2e6),
					zap.String("remote", "127.0.0.1:44840"),
					zap.String("key_id", "key_6792987a0c5931a5"),
					bc.own("auth", "api_key"),
					bc.own("product", "extraction"),
					zap.String("env", "live"),
					bc.own("upstream", "extraction"))
			}
		})
	}
}

// TestVerbatim: a Verbatim field encodes as zap.String would, in any core,
// and the redacting core writes it as it is (the caller vouches for it),
// while it still masks a zap.String with the same text.
func TestVerbatim(t *testing.T) {
	t.Parallel()
	encode := func(c func(zapcore.Core) zapcore.Core, f zap.Field) string {
		var buf bytes.Buffer
		cfg := zap.NewProductionEncoderConfig()
		cfg.TimeKey = "" // two lines to compare byte for byte
		enc := zapcore.NewJSONEncoder(cfg)
		zap.New(c(zapcore.NewCore(enc, zapcore.AddSync(&buf), zap.InfoLevel))).Info("m", f)
		return buf.String()
	}
	plain := func(c zapcore.Core) zapcore.Core { return c }
	for _, v := range []string{"", "sync", "0af7651916cd43dd8448eb211c80319c", "é\x00\"\\"} {
		if got, want := encode(plain, redact.Verbatim("k", v)), encode(plain, zap.String("k", v)); got != want {
			t.Errorf("Verbatim(%q) = %s, zap.String: %s", v, got, want)
		}
		if got, want := encode(redact.Core, redact.Verbatim("k", v)), encode(redact.Core, zap.String("k", v)); got != want {
			t.Errorf("through Core, Verbatim(%q) = %s, zap.String: %s", v, got, want)
		}
	}
	if got := encode(redact.Core, redact.Verbatim("k", key)); !strings.Contains(got, random) {
		t.Errorf("Core scanned a Verbatim field: %s", got)
	}
	if got := encode(redact.Core, zap.String("k", key)); strings.Contains(got, random) {
		t.Errorf("Core left a key in a string field: %s", got)
	}
}
