package logline_test

import (
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/internal/logline"
)

// An access line as keygate writes it: level, ISO 8601 time under "ts",
// logger name, message, then the fields.
func ExampleEncoderConfig() {
	enc := zapcore.NewJSONEncoder(logline.EncoderConfig())
	at := time.Date(2026, 11, 28, 14, 30, 0, 123_456_789, time.UTC)
	buf, err := enc.EncodeEntry(zapcore.Entry{Level: zapcore.InfoLevel, Time: at, LoggerName: "access", Message: "request"},
		[]zap.Field{zap.String("route", "sync"), zap.Int("status", 200), zap.Duration("wait", 2*time.Second)})
	if err != nil {
		panic(err)
	}
	defer buf.Free()
	_, _ = os.Stdout.Write(buf.Bytes())
	// Output:
	// {"level":"info","ts":"2026-11-28T14:30:00.123Z","logger":"access","msg":"request","route":"sync","status":200,"wait":2000}
}
