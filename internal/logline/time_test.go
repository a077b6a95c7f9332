package logline

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// encodeWith is the JSON line zap writes for an entry at t with the time
// encoder te.
func encodeWith(t testing.TB, te zapcore.TimeEncoder, at time.Time) string {
	t.Helper()
	cfg := zap.NewProductionEncoderConfig()
	cfg.TimeKey, cfg.EncodeTime = "ts", te
	buf, err := zapcore.NewJSONEncoder(cfg).EncodeEntry(zapcore.Entry{Time: at, Message: "m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	return buf.String()
}

// TestEncodeTimeIsISO8601: log lines carry the timestamps zap's
// ISO8601 encoder writes, whichever line came before (the reused text of
// the last millisecond is never another instant's or another zone's).
func TestEncodeTimeIsISO8601(t *testing.T) {
	kolkata := time.FixedZone("IST", 5*3600+1800)
	pst := time.FixedZone("PST", -8*3600)
	base := time.Date(2026, 11, 25, 7, 30, 59, 999_400_000, time.UTC)
	for _, tc := range []struct {
		name string
		at   time.Time
	}{
		{"UTC", base},
		{"same millisecond, later nanosecond", base.Add(500 * time.Microsecond)},
		{"same millisecond, another zone", base.Add(500 * time.Microsecond).In(kolkata)},
		{"same millisecond, a negative offset", base.In(pst)},
		{"the next millisecond, a new second", base.Add(time.Millisecond)},
		{"another millisecond of that second", base.Add(5 * time.Millisecond)},
		{"the local zone", base.Local()},
		{"back in time", base.Add(-time.Hour)},
		{"before 1970", time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC)},
		{"before 1970, the same millisecond", time.Date(1969, 12, 31, 23, 59, 59, 999_000_001, time.UTC)},
		{"zero time", time.Time{}},
	} {
		if got, want := encodeWith(t, EncodeTime, tc.at), encodeWith(t, zapcore.ISO8601TimeEncoder, tc.at); got != want {
			t.Errorf("%s: got %s, want %s", tc.name, got, want)
		}
	}
}

// FuzzEncodeTime: any instant, in any of a few zones, after any other,
// is written as the ISO8601 encoder writes it.
func FuzzEncodeTime(f *testing.F) {
	f.Add(int64(1795000000), int64(999_400_000), int64(500_000), uint8(0), uint8(1))
	f.Add(int64(-1), int64(999_999_999), int64(1), uint8(2), uint8(2))
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("IST", 5*3600+1800), time.FixedZone("X", -(12*3600 + 45*60))}
	f.Fuzz(func(t *testing.T, sec, nsec, step int64, z1, z2 uint8) {
		a := time.Unix(sec%(1<<40), nsec%1_000_000_000).In(zones[int(z1)%len(zones)])
		b := a.Add(time.Duration(step % int64(time.Hour))).In(zones[int(z2)%len(zones)])
		for _, at := range []time.Time{a, b} {
			if got, want := encodeWith(t, EncodeTime, at), encodeWith(t, zapcore.ISO8601TimeEncoder, at); got != want {
				t.Fatalf("%v: got %s, want %s", at, got, want)
			}
		}
	})
}

func BenchmarkLogTime(b *testing.B) {
	cfg := zap.NewProductionEncoderConfig()
	cfg.TimeKey = "ts"
	for _, bc := range []struct {
		name string
		te   zapcore.TimeEncoder
	}{{"iso8601", zapcore.ISO8601TimeEncoder}, {"reused", EncodeTime}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg.EncodeTime = bc.te
			enc := zapcore.NewJSONEncoder(cfg)
			ent := zapcore.Entry{Message: "m"}
			b.ReportAllocs()
			for range b.N {
				ent.Time = time.Now()
				buf, err := enc.EncodeEntry(ent, nil)
				if err != nil {
					b.Fatal(err)
				}
				buf.Free()
			}
		})
	}
}
