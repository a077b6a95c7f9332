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

// FuzzFields: for any text, Fields masks it in every kind of field that
// carries text (string, byte string, error, Stringer) exactly as String
// does, leaves a Verbatim field and the numbers alone, returns fs itself
// when nothing changed, and leaves no secret in an array's text.
func FuzzFields(f *testing.F) {
	for _, s := range []string{"", key, "Bearer " + jwt, "kga_abc", "kgA_0", "/sync", "127.0.0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fs := []zapcore.Field{
			zap.String("s", s),
			zap.ByteString("b", []byte(s)),
			zap.Error(errors.New(s)),
			zap.Stringer("st", stringer(s)),
			redact.Verbatim("v", s),
			zap.Int("n", len(s)),
		}
		out := redact.Fields(fs)
		if !redact.Contains(s) {
			if &out[0] != &fs[0] {
				t.Fatalf("Fields copied fields without a secret (%q)", s)
			}
		} else {
			want := redact.String(s)
			for _, g := range out[:4] {
				if g.Type != zapcore.StringType || g.String != want {
					t.Errorf("%s: %+v, want the string %q", g.Key, g, want)
				}
			}
			if out[4].String != s || out[5].Integer != int64(len(s)) {
				t.Errorf("Fields changed %+v or %+v", out[4], out[5])
			}
		}
		// An array is scanned as its JSON text, which may join what
		// String alone would not mask ("kga_0" is too short; quoted it
		// is not): either as it was or masked.
		a := redact.Fields([]zapcore.Field{zap.Strings("a", []string{s})})[0]
		if a.Type != zapcore.ArrayMarshalerType && (a.Type != zapcore.StringType || redact.Contains(a.String)) {
			t.Errorf("array: %+v still holds a secret", a)
		}
	})
}
