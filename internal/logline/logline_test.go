package logline

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapLine is the line zap's JSON encoder writes under EncoderConfig.
func zapLine(t testing.TB, ent zapcore.Entry, fields ...zap.Field) string {
	t.Helper()
	buf, err := zapcore.NewJSONEncoder(EncoderConfig()).EncodeEntry(ent, fields)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	return buf.String()
}

// tricky are strings whose escaping differs between JSON encoders: quotes,
// backslashes, every kind of control character, invalid and valid
// multi-byte UTF-8, the separators JavaScript minds, HTML's characters.
var tricky = []string{
	"", "plain", `a"b`, `a\b`, "a\nb\rc\td", "\x00\x01\x1f\x7f", "\x08\x0c",
	"caf\xc3\xa9", "\xff", "a\xc3", "\xed\xa0\x80", "\xf0\x9f\x94\x91 key",
	"\u2028\u2029", "<script>&amp;</script>", "svc_live_" + strings.Repeat("x", 32),
	strings.Repeat("é\"", 300),
}

// TestLineIsZapsLine: a line appended here is byte for byte the line zap
// writes for the same entry and fields, whatever the strings and numbers.
func TestLineIsZapsLine(t *testing.T) {
	at := time.Date(2026, 11, 28, 14, 30, 0, 123_456_789, time.UTC)
	floats := []float64{0, math.Copysign(0, -1), 1.5, 0.001, 123.456789, 1e21, 1e-7, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1)}
	ints := []int64{0, -1, 200, math.MaxInt64, math.MinInt64}
	for _, tc := range []struct {
		name   string
		level  zapcore.Level
		at     time.Time
		logger string
		msg    string
	}{
		{"access line", zapcore.InfoLevel, at, "access", "request"},
		{"no logger name", zapcore.WarnLevel, at.In(time.FixedZone("IST", 5*3600+1800)), "", "m"},
		{"zero time", zapcore.ErrorLevel, time.Time{}, "a.b", "m"},
		{"odd level", zapcore.Level(42), at, "access", "request"},
	} {
		for _, s := range tricky {
			got := Begin(nil, tc.level, tc.at, tc.logger+s, tc.msg+s)
			got = String(got, "k"+s, s)
			fields := []zap.Field{zap.String("k"+s, s)}
			for i, f := range floats {
				got = Float(got, "f", f)
				fields = append(fields, zap.Float64("f", f))
				got = Int(got, "i", ints[i%len(ints)])
				fields = append(fields, zap.Int64("i", ints[i%len(ints)]))
			}
			got = Bool(Bool(got, "t", true), "no", false)
			fields = append(fields, zap.Bool("t", true), zap.Bool("no", false))
			want := zapLine(t, zapcore.Entry{Level: tc.level, Time: tc.at, LoggerName: tc.logger + s, Message: tc.msg + s}, fields...)
			if string(End(got)) != want {
				t.Errorf("%s, %q:\n got %s\nwant %s", tc.name, s, End(got), want)
			}
		}
	}
}

// FuzzLineIsZapsLine: any strings, integer and float make the line zap
// makes.
func FuzzLineIsZapsLine(f *testing.F) {
	for i, s := range tricky {
		f.Add(s, "k", int64(i), float64(i)/3, int64(1795000000123))
	}
	f.Fuzz(func(t *testing.T, val, key string, n int64, x float64, ms int64) {
		at := time.UnixMilli(ms % (1 << 45)).UTC()
		got := Begin(nil, zapcore.InfoLevel, at, "access", "request")
		got = End(Float(Int(String(got, key, val), key, n), "x", x))
		want := zapLine(t, zapcore.Entry{Level: zapcore.InfoLevel, Time: at, LoggerName: "access", Message: "request"},
			zap.String(key, val), zap.Int64(key, n), zap.Float64("x", x))
		if string(got) != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkAccessLine: an access line's worth of fields, appended here and
// through zap's encoder.
func BenchmarkAccessLine(b *testing.B) {
	at := time.Now()
	b.Run("logline", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for range b.N {
			buf = Begin(buf[:0], zapcore.InfoLevel, at, "access", "request")
			buf = String(buf, "trace_id", "4bf92f3577b34da6a3ce929d0e0e4736")
			buf = String(buf, "method", "POST")
			buf = String(buf, "path", "/sync")
			buf = Int(buf, "status", 200)
			buf = Float(buf, "latency_ms", 1.234)
			buf = String(buf, "remote", "127.0.0.1:51234")
			buf = End(buf)
		}
	})
	b.Run("zap", func(b *testing.B) {
		b.ReportAllocs()
		enc := zapcore.NewJSONEncoder(EncoderConfig())
		ent := zapcore.Entry{Level: zapcore.InfoLevel, Time: at, LoggerName: "access", Message: "request"}
		for range b.N {
			buf, err := enc.EncodeEntry(ent, []zap.Field{zap.String("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"), zap.String("method", "POST"),
				zap.String("path", "/sync"), zap.Int("status", 200), zap.Float64("latency_ms", 1.234), zap.String("remote", "127.0.0.1:51234")})
			if err != nil {
				b.Fatal(err)
			}
			buf.Free()
		}
	})
}

// FuzzMillis: a duration in milliseconds is written as Float writes the
// quotient, whatever the duration.
func FuzzMillis(f *testing.F) {
	for _, d := range []int64{0, 1, 10, 999_999, 1_000_000, 1_500_000, 1_234_567, 120_000_000_000, 1e15 - 1, 1e15, -1, math.MaxInt64, math.MinInt64} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, d int64) {
		// d itself, and d brought into the exact path's range.
		for _, d := range []int64{d, d % 1e15, (d % 1e15) & math.MaxInt64 % 1e15} {
			got := string(Millis(nil, "ms", time.Duration(d)))
			want := string(Float(nil, "ms", float64(d)/float64(time.Millisecond)))
			if got != want {
				t.Fatalf("%d ns: got %s, want %s", d, got, want)
			}
		}
	})
}

// TestMillis: typical latencies, and the edges of the exact path.
func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, `,"ms":0`},
		{time.Nanosecond, `,"ms":0.000001`},
		{1_230 * time.Microsecond, `,"ms":1.23`},
		{1_234_567, `,"ms":1.234567`},
		{2 * time.Second, `,"ms":2000`},
		{1e15 - 1, `,"ms":999999999.999999`},
		{1e15, `,"ms":1000000000`},
		{-1_500_000, `,"ms":-1.5`},
	} {
		if got := string(Millis(nil, "ms", c.d)); got != c.want {
			t.Errorf("%d ns: got %s, want %s", c.d, got, c.want)
		}
	}
	// A million durations spread evenly over the orders of magnitude of
	// the exact path.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		d := time.Duration(math.Pow(10, rng.Float64()*15))
		if got, want := string(Millis(nil, "ms", d)), string(Float(nil, "ms", float64(d)/float64(time.Millisecond))); got != want {
			t.Fatalf("%d ns: got %s, want %s", d, got, want)
		}
	}
}
