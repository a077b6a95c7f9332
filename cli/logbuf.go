package cli

import (
	"errors"
	"io"
	"time"

	"go.uber.org/zap/zapcore"
)

// The access log is written through a buffer, so that a busy gateway does
// not make one write syscall per request. What that costs is bounded: a
// crash (SIGKILL, OOM kill, power loss) loses at most the last
// logBufferFlush of access lines, or logBufferSize bytes of them, whichever
// is less. A clean shutdown (SIGTERM, SIGINT) flushes everything. Lines of
// any other logger, and any line at warn or above, are written at once
// (flushing the access lines before them), so start-up, errors and outage
// warnings are never held back.
const (
	logBufferSize  = 256 << 10
	logBufferFlush = time.Second
	// accessLogger is the name of the gateway's access logger
	// (server.New names it).
	accessLogger = "access"
)

// bufferedSink returns the write syncer every log line goes through, and a
// function that flushes it and stops its flush timer.
func bufferedSink(w io.Writer) (*zapcore.BufferedWriteSyncer, func()) {
	// Flushing hands the lines to w; it never fsyncs, which stderr as a
	// pipe or terminal would refuse (EINVAL).
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(writerOnly{w}), Size: logBufferSize, FlushInterval: logBufferFlush}
	return ws, func() { _ = ws.Stop() }
}

// flushCore writes through a buffered sink and flushes it after every
// entry that must not wait: those of loggers other than the access log, and
// any entry at warn or above.
type flushCore struct {
	zapcore.Core
	ws zapcore.WriteSyncer
}

func (c flushCore) With(fields []zapcore.Field) zapcore.Core {
	return flushCore{Core: c.Core.With(fields), ws: c.ws}
}

func (c flushCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c flushCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	err := c.Core.Write(e, fields)
	if e.LoggerName != accessLogger || e.Level >= zapcore.WarnLevel {
		if serr := c.ws.Sync(); err == nil {
			err = serr
		}
	}
	return err
}

// writerOnly hides any Sync method of the writer underneath.
type writerOnly struct{ io.Writer }

// requestLoggers are the loggers whose entries below warn are request
// lines: the gateway's access log, the admin API's and the portal's
// (server names them).
var requestLoggers = map[string]bool{accessLogger: true, "admin_api": true, "portal": true}

// accessSplit writes request lines (the entries below warn of
// requestLoggers) to access and every other entry to rest, so that the
// demo's terminal keeps its banner, start-up lines and warnings while the
// request lines go to a file.
type accessSplit struct{ rest, access zapcore.Core }

func (s accessSplit) Enabled(l zapcore.Level) bool { return s.rest.Enabled(l) }

func (s accessSplit) With(fields []zapcore.Field) zapcore.Core {
	return accessSplit{rest: s.rest.With(fields), access: s.access.With(fields)}
}

func (s accessSplit) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if s.Enabled(e.Level) {
		return ce.AddCore(e, s)
	}
	return ce
}

func (s accessSplit) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if requestLoggers[e.LoggerName] && e.Level < zapcore.WarnLevel {
		return s.access.Write(e, fields)
	}
	return s.rest.Write(e, fields)
}

func (s accessSplit) Sync() error { return errors.Join(s.rest.Sync(), s.access.Sync()) }
