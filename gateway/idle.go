package gateway

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// idleBody watches a request body for progress. A timer checks a few times
// per timeout whether any byte arrived since its last look; when none has
// for the whole timeout it marks the body timed out and sets the
// connection's read deadline in the past, which fails the pending read
// wherever it is (formctx reading the prefix, or the transport streaming
// the rest to the upstream, which then aborts the upstream request). Reads
// pay one atomic add; there is no per-read deadline call.
//
// It lives inside state (no allocation of its own). The timer stops at the
// body's EOF and when the handler returns.
type idleBody struct {
	rc    io.ReadCloser
	read  atomic.Int64 // bytes read so far
	fired atomic.Bool  // the idle timeout struck

	mu       sync.Mutex // guards the rest, and w against use after the handler
	w        http.ResponseWriter
	timer    *time.Timer
	timeout  time.Duration
	seen     int64     // read at the timer's last look
	progress time.Time // when the timer last saw progress
	stopped  bool
}

// idleChecks is how many times per timeout the timer looks: the timeout
// strikes between timeout and timeout*(1+1/idleChecks) after the last byte.
const idleChecks = 4

// watch starts watching rc; w reaches the connection's read deadline.
func (b *idleBody) watch(w http.ResponseWriter, rc io.ReadCloser, timeout time.Duration) {
	b.mu.Lock() // the timer may fire before AfterFunc returns
	b.rc, b.w, b.timeout, b.progress = rc, w, timeout, time.Now()
	b.timer = time.AfterFunc(timeout/idleChecks, b.check)
	b.mu.Unlock()
}

func (b *idleBody) check() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	now := time.Now()
	if n := b.read.Load(); n != b.seen {
		b.seen, b.progress = n, now
	}
	if idle := now.Sub(b.progress); idle < b.timeout {
		b.timer.Reset(min(b.timeout/idleChecks, b.timeout-idle))
		return
	}
	b.stopped = true
	b.fired.Store(true)
	// A deadline in the past fails the pending read at once, on HTTP/1 and
	// HTTP/2 alike.
	_ = http.NewResponseController(b.w).SetReadDeadline(now.Add(-time.Second))
}

// stop ends the watch; safe to call more than once, and on a body that was
// never watched.
func (b *idleBody) stop() {
	if b.timer == nil {
		return
	}
	b.mu.Lock()
	b.stopped = true
	b.timer.Stop()
	b.mu.Unlock()
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.read.Add(int64(n))
	}
	if err != nil {
		if err == io.EOF {
			b.stop() // nothing more to wait for: the upstream's answer may take long
		} else if b.fired.Load() {
			err = errBodyIdle
		}
	}
	return n, err
}

func (b *idleBody) Close() error { return b.rc.Close() }

// errBodyIdle is the read error of a body that timed out.
var errBodyIdle = errors.New("gateway: no request body data within the body idle timeout")

// watchBody puts r.Body under the idle timeout when there is a body and a
// timeout. The caller must defer st.idle.stop().
func (g *Gateway) watchBody(w http.ResponseWriter, r *http.Request, st *state) {
	if g.cfg.BodyIdleTimeout <= 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	st.idle.watch(w, r.Body, g.cfg.BodyIdleTimeout)
	r.Body = &st.idle
}

// failBody answers a failure to read the request body: 408 when the idle
// timeout struck (an HTTP/1 connection is then closed; on HTTP/2 only the
// stream ends), else bodyError's status.
func (g *Gateway) failBody(r *http.Request, w http.ResponseWriter, st *state, err error) {
	if st.idle.fired.Load() || errors.Is(err, errBodyIdle) {
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		g.fail(w, st, http.StatusRequestTimeout, g.idleMsg, "body_idle")
		return
	}
	status, msg := bodyError(r.Context(), err)
	g.fail(w, st, status, msg, "body")
}

func idleMessage(d time.Duration) string {
	return "Request Timeout: no request body data for " + d.String() + "; the request was abandoned"
}

func concurrencyMessage(n int) string {
	return "Rate Limited: more than " + strconv.Itoa(n) + " concurrent requests for this credential; retry when one finishes"
}
