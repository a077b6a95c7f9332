package redact

import (
	"encoding/json"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Core wraps c so that every entry's message and every field (strings,
// byte strings, errors, Stringers, and the text of arrays, objects and
// reflected values) is redacted before c encodes it, fields added with
// With included. Wrapping a core that already redacts returns it as it
// is. The returned core decides by level only (Enabled), so wrap the core
// that encodes, inside any sampler. It is safe for concurrent use if c is.
func Core(c zapcore.Core) zapcore.Core {
	if _, ok := c.(*core); ok {
		return c
	}
	return &core{c}
}

type core struct{ zapcore.Core }

func (c *core) With(fs []zapcore.Field) zapcore.Core {
	return &core{c.Core.With(Fields(fs))}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fs []zapcore.Field) error {
	e.Message = String(e.Message)
	return c.Core.Write(e, Fields(fs))
}

// Fields returns fs with every secret masked: fs itself when there is
// none, else a copy. A field whose value held a secret becomes a string
// field with the redacted text.
func Fields(fs []zapcore.Field) []zapcore.Field {
	var out []zapcore.Field
	for i := range fs {
		// The common fields are looked at in place: a string without a
		// secret, a Verbatim one, and the kinds that hold no text (numbers,
		// bools, times, durations; binary is written as base64) are kept
		// without copying them through field.
		f := &fs[i]
		keep := false
		switch f.Type {
		case zapcore.StringType:
			_, v := f.Interface.(verbatim)
			keep = v || !Contains(f.String)
		case zapcore.ByteStringType, zapcore.ErrorType, zapcore.StringerType,
			zapcore.ArrayMarshalerType, zapcore.ObjectMarshalerType, zapcore.InlineMarshalerType, zapcore.ReflectType:
		default:
			keep = true
		}
		var g zapcore.Field
		if !keep {
			var changed bool
			g, changed = field(*f)
			keep = !changed
		}
		if keep {
			if out != nil {
				out[i] = *f
			}
			continue
		}
		if out == nil {
			out = make([]zapcore.Field, len(fs))
			copy(out, fs[:i])
		}
		out[i] = g
	}
	if out == nil {
		return fs
	}
	return out
}

// Verbatim is zap.String for a value the program made itself that cannot
// hold a credential: a name from a fixed set (a route, a product, a known
// HTTP method) or an id in a checked form (a trace id of 32 hex digits).
// Core writes it without scanning it; the caller vouches for it, so never
// give it text that came from a client as it came. Every core encodes it
// exactly as it would zap.String(key, val).
func Verbatim(key, val string) zap.Field {
	return zap.Field{Key: key, Type: zapcore.StringType, String: val, Interface: verbatim{}}
}

// verbatim marks a Verbatim field (zap ignores Interface for strings).
type verbatim struct{}

func field(f zapcore.Field) (zapcore.Field, bool) {
	switch f.Type {
	case zapcore.StringType:
		if _, ok := f.Interface.(verbatim); ok {
			break
		}
		if r := String(f.String); r != f.String {
			f.String = r
			return f, true
		}
	case zapcore.ByteStringType:
		if b, ok := f.Interface.([]byte); ok && Contains(string(b)) {
			return zap.String(f.Key, String(string(b))), true
		}
	case zapcore.ErrorType:
		err, ok := f.Interface.(error)
		if !ok || err == nil {
			break
		}
		text := safeText(err.Error)
		verbose := text
		if fm, ok := err.(fmt.Formatter); ok {
			verbose = fmt.Sprintf("%+v", fm)
		}
		if Contains(text) || Contains(verbose) {
			return zap.String(f.Key, String(text)), true
		}
	case zapcore.StringerType:
		if st, ok := f.Interface.(fmt.Stringer); ok && st != nil {
			if text := safeText(st.String); Contains(text) {
				return zap.String(f.Key, String(text)), true
			}
		}
	case zapcore.ArrayMarshalerType, zapcore.ObjectMarshalerType, zapcore.InlineMarshalerType, zapcore.ReflectType:
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		b, err := json.Marshal(enc.Fields)
		if err != nil {
			if text := fmt.Sprint(f.Interface); Contains(text) {
				return zap.String(f.Key, String(text)), true
			}
			break
		}
		if text := string(b); Contains(text) {
			return zap.String(f.Key, String(text)), true
		}
	}
	return f, false
}

// safeText calls fn, as zap would, turning a panic (a nil receiver) into
// text.
func safeText(fn func() string) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprintf("PANIC=%v", r)
		}
	}()
	return fn()
}
