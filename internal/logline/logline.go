// Package logline is keygate's log line: the encoder configuration every
// logger of the process writes with (EncoderConfig), the gateway's access
// log among them.
package logline

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EncoderConfig is the encoder configuration of keygate's log lines:
// zap's production configuration with the time under "ts" as
// ISO8601 (EncodeTime) and durations in milliseconds.
func EncoderConfig() zapcore.EncoderConfig {
	c := zap.NewProductionEncoderConfig()
	c.TimeKey = "ts"
	c.EncodeTime = EncodeTime
	c.EncodeDuration = zapcore.MillisDurationEncoder
	return c
}
