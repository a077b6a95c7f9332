package cli

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/keygate/keygate/config"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLoggerBuffersOnlyAccessLines checks the bounded-loss promise of
// logbuf.go: access lines wait in the buffer, any other line (and any
// warning) is written at once with the access lines before it, and stop
// flushes the rest.
func TestLoggerBuffersOnlyAccessLines(t *testing.T) {
	var out lockedBuffer
	log, stop, err := newLogger(config.LogConfig{Level: "info", Format: "json"}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	access := log.Named(accessLogger)
	access.Info("request one")
	if s := out.String(); s != "" {
		t.Fatalf("an access line was written at once: %q", s)
	}
	log.Info("keygate serving")
	if s := out.String(); !strings.Contains(s, "request one") || !strings.Contains(s, "keygate serving") || strings.Index(s, "request one") > strings.Index(s, "keygate serving") {
		t.Fatalf("a start-up line did not flush the access lines before it, in order: %q", s)
	}
	access.Info("request two")
	access.Warn("access warning")
	if s := out.String(); !strings.Contains(s, "access warning") {
		t.Fatalf("a warning was held back: %q", s)
	}
	access.Info("request three")
	stop()
	if s := out.String(); !strings.Contains(s, "request three") {
		t.Fatalf("stop did not flush: %q", s)
	}
	if n := strings.Count(out.String(), "\n"); n != 5 {
		t.Fatalf("want 5 whole lines, got %d: %q", n, out.String())
	}
}

// TestLoggerOnAPipe: flushing must not fsync stderr, which a pipe refuses;
// zap would report "write error: sync /dev/stderr: invalid argument".
func TestLoggerOnAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	log, stop, err := newLogger(config.LogConfig{Level: "info", Format: "json"}, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("keygate serving")
	stop()
	w.Close()
	out, _ := io.ReadAll(r)
	if strings.Contains(string(out), "error") || !strings.Contains(string(out), "keygate serving") {
		t.Fatalf("output: %q", out)
	}
}

// TestLoggerSplitsAccessLines: with an access writer (the demo's
// data/access.log), request lines go there and nowhere else; start-up
// lines and every warning, the access logger's included, stay on the
// terminal; secrets are redacted in both.
func TestLoggerSplitsAccessLines(t *testing.T) {
	var term, file lockedBuffer
	log, stop, err := newLogger(config.LogConfig{Level: "info", Format: "json"}, &term, &file)
	if err != nil {
		t.Fatal(err)
	}
	key := "svc_live_" + strings.Repeat("a", 36)
	access := log.Named(accessLogger).With(zap.String("route", "api"))
	log.Info("keygate serving")
	access.Info("request", zap.String("key", key))
	access.Warn("rate limiter failed")
	access.Info("request two")
	log.Named("admin_api").Info("admin api")
	log.Named("portal").Info("portal request")
	log.Named("portal").Error("portal failed")
	stop()
	for _, c := range []struct {
		name, out  string
		has, lacks []string
	}{
		{"terminal", term.String(), []string{"keygate serving", "rate limiter failed", "portal failed"}, []string{`"msg":"request"`, "request two", "admin api", "portal request", key}},
		{"access file", file.String(), []string{`"msg":"request"`, "request two", `"route":"api"`, "admin api", "portal request"}, []string{"keygate serving", "rate limiter failed", "portal failed", key}},
	} {
		for _, h := range c.has {
			if !strings.Contains(c.out, h) {
				t.Errorf("%s lacks %q: %s", c.name, h, c.out)
			}
		}
		for _, l := range c.lacks {
			if strings.Contains(c.out, l) {
				t.Errorf("%s holds %q: %s", c.name, l, c.out)
			}
		}
	}
}
