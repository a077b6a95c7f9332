// Package logline is keygate's JSON log line: the encoder configuration
// every logger of the process writes with (EncoderConfig), and an
// appender that writes the same bytes by hand (Begin, String, Int, Float,
// Millis, Bool, End) for the one line a busy gateway writes per request.
//
// Why both: the access line through zap (fields built, checked, redacted
// and encoded by zapcore's JSON encoder, then written) cost keygate about
// 4% of its CPU per request at 256 B more than appending it here and
// writing it to the same sink, measured side by side (make bench-peers
// -only-side-by-side). The appender writes exactly what zap's JSON
// encoder writes under EncoderConfig, byte for byte (TestLineIsZapsLine,
// FuzzLineIsZapsLine), so a reader of the log cannot tell which wrote a
// line.
package logline

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"

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

// Begin starts a line as zap's JSON encoder does under EncoderConfig for
// an entry of logger at level, time t and message msg, with no caller
// and no fields yet: level, ts (unless t is zero), logger (unless
// empty), msg.
func Begin(b []byte, level zapcore.Level, t time.Time, logger, msg string) []byte {
	b = append(b, `{"level":"`...)
	b = append(b, level.String()...) // lowercase, as zapcore.LowercaseLevelEncoder
	b = append(b, '"')
	if !t.IsZero() {
		b = append(append(append(b, `,"ts":"`...), timeText(t)...), '"')
	}
	if logger != "" {
		b = appendString(append(b, `,"logger":`...), logger)
	}
	return appendString(append(b, `,"msg":`...), msg)
}

// String appends the field key: val. The value is written as it is: what
// may hold a credential is for the caller to redact first.
func String(b []byte, key, val string) []byte {
	return appendString(appendKey(b, key), val)
}

// Int appends the field key: v.
func Int(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, key), v, 10)
}

// Float appends the field key: v, as zap writes a float64 (NaN and the
// infinities as strings).
func Float(b []byte, key string, v float64) []byte {
	b = appendKey(b, key)
	switch {
	case math.IsNaN(v):
		return append(b, `"NaN"`...)
	case math.IsInf(v, 1):
		return append(b, `"+Inf"`...)
	case math.IsInf(v, -1):
		return append(b, `"-Inf"`...)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// Millis appends the field key: d in milliseconds, exactly as Float
// writes float64(d)/float64(time.Millisecond), without the float
// formatting (three of them were 0.6% of keygate's CPU per request).
// Below 10^15 ns (11 days) the quotient has at most 15 significant
// digits, and two decimals of at most 15 digits are never the same
// float64, so the shortest decimal that reads back as the quotient is
// its exact decimal: whole milliseconds, then the nanoseconds without
// their trailing zeros (FuzzMillis).
func Millis(b []byte, key string, d time.Duration) []byte {
	if d < 0 || d >= 1e15 {
		return Float(b, key, float64(d)/float64(time.Millisecond))
	}
	b = strconv.AppendInt(appendKey(b, key), int64(d/time.Millisecond), 10)
	frac := int64(d % time.Millisecond)
	if frac == 0 {
		return b
	}
	digits := 6
	for frac%10 == 0 {
		frac /= 10
		digits--
	}
	b = append(b, '.')
	for range digits - len(strconv.Itoa(int(frac))) {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, frac, 10)
}

// Bool appends the field key: v.
func Bool(b []byte, key string, v bool) []byte {
	return strconv.AppendBool(appendKey(b, key), v)
}

// End closes the line, with zap's line ending.
func End(b []byte) []byte { return append(b, '}', '\n') }

func appendKey(b []byte, key string) []byte {
	return append(appendString(append(b, ','), key), ':')
}

// appendString appends s as a JSON string exactly as zap's JSON encoder
// escapes it: quote, backslash and control characters escaped (\n, \r,
// \t by name), invalid UTF-8 as \ufffd, everything else as it is (no
// HTML escaping, U+2028 and U+2029 unescaped).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(append(b, s[last:i]...), `\ufffd`...)
			i++
			last = i
			continue
		}
		if c >= 0x20 && c != '\\' && c != '"' {
			i++
			continue
		}
		b = append(b, s[last:i]...)
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		last = i
	}
	return append(append(b, s[last:]...), '"')
}

const hex = "0123456789abcdef"
