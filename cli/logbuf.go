package cli

import (
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
