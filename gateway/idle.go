package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/framing"
)

// clientBody is the one wrapper of a request body as it comes from the
// client (below formctx on /sync, beneath nothing else elsewhere). It
// counts the bytes read, keeps the first read error (the client gone, a
// truncated body, the size cap of the http.MaxBytesReader beneath it),
// and watches the body for progress: it cuts a body that
// brings no byte for the idle timeout (a stalled body), and a body whose
// average rate since keygate started reading it is below the minimum
// body rate once the rate's grace period has passed (a trickled body). A
// timer looks a few times per idle timeout, and for the rate at the moment
// the bytes read so far would fall below it. When it cuts a body it marks
// why and sets the connection's read deadline in the past, which fails the
// pending read wherever it is (formctx reading the prefix, or the transport
// streaming the rest to the upstream, which then aborts the upstream
// request). Reads pay one atomic add; there is no per-read deadline call.
//
// It lives inside state (no allocation of its own), and wraps every body,
// watched or not, so that refuse knows whether the body was read to its
// end. The timer stops at the body's EOF and when the handler returns.
type clientBody struct {
	rc    io.ReadCloser
	read  atomic.Int64          // bytes read so far
	err   atomic.Pointer[error] // the first read error other than io.EOF
	fired atomic.Int32          // cutNone, or why the body was cut
	eof   atomic.Bool           // the body was read to its end

	mu       sync.Mutex // guards the rest, and w against use after the handler
	w        http.ResponseWriter
	timer    *time.Timer
	lim      *bodyLimits
	start    time.Duration // when the watch began (mono)
	seen     int64         // read at the timer's last look
	progress time.Duration // when the timer last saw progress (mono)
	stopped  bool
}

// bodyLimits are the limits a body is watched under: the idle timeout (0
// for none) and the minimum rate. One per Gateway, shared by every
// request, so that state stays small.
type bodyLimits struct {
	timeout time.Duration
	rate    MinBodyRate
	// idleMsg and slowMsg are the 408 texts of a body cut for either.
	idleMsg, slowMsg string
}

func (l *bodyLimits) on() bool { return l.timeout > 0 || l.rate.On() }

// monoBase anchors mono: monotonic times as one word, not a time.Time.
var monoBase = time.Now()

// mono is the monotonic time since monoBase.
func mono() time.Duration { return time.Since(monoBase) }

// Why a body was cut.
const (
	cutNone int32 = iota
	cutIdle
	cutSlow
)

// idleChecks is how many times per timeout the timer looks: the timeout
// strikes between timeout and timeout*(1+1/idleChecks) after the last byte.
const idleChecks = 4

// rateStep is the shortest wait between two looks at the rate, so that a
// body arriving at just the minimum rate does not keep the timer busy.
const rateStep = 100 * time.Millisecond

// watch starts watching rc; w reaches the connection's read deadline.
func (b *clientBody) watch(w http.ResponseWriter, rc io.ReadCloser, lim *bodyLimits) {
	b.rc = rc
	if !lim.on() {
		return
	}
	b.mu.Lock() // the timer may fire before AfterFunc returns
	now := mono()
	b.w, b.lim, b.start, b.progress = w, lim, now, now
	b.timer = time.AfterFunc(b.nextLook(now, 0), b.check)
	b.mu.Unlock()
}

// nextLook is how long the timer waits before its next look, n bytes
// having been read by now. b.mu is held.
func (b *clientBody) nextLook(now time.Duration, n int64) time.Duration {
	next := time.Duration(-1)
	if t := b.lim.timeout; t > 0 {
		next = min(t/idleChecks, t-(now-b.progress))
	}
	if r := b.lim.rate; r.On() {
		// n bytes keep the average at the minimum until start+n/rate.
		at := max(r.Grace, time.Duration(float64(n)/float64(r.BytesPerSecond)*float64(time.Second)))
		d := max(at-(now-b.start), rateStep)
		if next < 0 || d < next {
			next = d
		}
	}
	return max(next, time.Millisecond)
}

func (b *clientBody) check() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	now := mono()
	n := b.read.Load()
	if n != b.seen {
		b.seen, b.progress = n, now
	}
	switch {
	case b.lim.timeout > 0 && now-b.progress >= b.lim.timeout:
		b.cut(cutIdle)
	case b.lim.rate.slow(n, now-b.start):
		b.cut(cutSlow)
	default:
		b.timer.Reset(b.nextLook(now, n))
	}
}

// cut ends the watch and fails the pending read. b.mu is held.
func (b *clientBody) cut(why int32) {
	b.stopped = true
	b.fired.Store(why)
	// A deadline in the past fails the pending read at once, on HTTP/1 and
	// HTTP/2 alike.
	_ = http.NewResponseController(b.w).SetReadDeadline(time.Now().Add(-time.Second))
}

// stop ends the watch; safe to call more than once, and on a body that was
// never watched.
func (b *clientBody) stop() {
	if b.timer == nil {
		return
	}
	b.mu.Lock()
	b.stopped = true
	b.timer.Stop()
	b.mu.Unlock()
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.read.Add(int64(n))
	}
	if err != nil {
		if err == io.EOF {
			b.eof.Store(true)
			b.stop() // nothing more to wait for: the upstream's answer may take long
		} else {
			if b.fired.Load() != cutNone {
				err = errBodyIdle
			}
			first := err // a variable of this branch's: only a failed read allocates
			b.err.CompareAndSwap(nil, &first)
		}
	}
	return n, err
}

// failure is the first read error other than io.EOF, or nil.
func (b *clientBody) failure() error {
	if err := b.err.Load(); err != nil {
		return *err
	}
	return nil
}

func (b *clientBody) Close() error { return b.rc.Close() }

// errBodyIdle is the read error of a body that was cut.
var errBodyIdle = errors.New("gateway: request body cut: no data within the body idle timeout, or below the minimum body rate")

// watchBody puts r.Body under the idle timeout and the minimum body rate,
// and, capped, under the size cap (max_body_bytes) first.
// A body whose every byte has already arrived (framing.BodyBuffered: a
// small upload sent with its head, most of them) is wrapped without a
// timer: its reads never wait for the client, so there is nothing to cut,
// and the timer's start and stop were about 1% of keygate's CPU per
// request at 256 B. The caller must defer st.body.stop().
func (g *Gateway) watchBody(w *recorder, r *http.Request, st *state, capped bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	lim := &g.bodyLimits
	if framing.BodyBuffered(r) {
		lim = &noBodyLimits
	}
	rc := r.Body
	if capped {
		// The real ResponseWriter, not the recorder: over the cap,
		// MaxBytesReader tells net/http to close the connection after the
		// 413 rather than read on.
		rc = http.MaxBytesReader(w.ResponseWriter, rc, g.cfg.MaxBodyBytes)
	}
	st.body.watch(w, rc, lim)
	r.Body = &st.body
}

// noBodyLimits are the limits of a body that cannot stall.
var noBodyLimits bodyLimits

// refusal is the refusal for a failure to read the request body: 408
// when the body was cut (an HTTP/1 connection is then closed; on HTTP/2
// only the stream ends), else bodyError's.
func (l *bodyLimits) refusal(r *http.Request, st *state, err error) refusal {
	switch st.body.fired.Load() {
	case cutIdle:
		return refusal{kind: refBodyIdle, message: l.idleMsg}
	case cutSlow:
		return refusal{kind: refBodySlow, message: l.slowMsg}
	}
	return bodyError(r.Context(), err)
}

func idleMessage(d time.Duration) string {
	return "Request Timeout: no request body data for " + d.String() + "; the request was abandoned"
}

func slowMessage(r MinBodyRate) string {
	rate, _, _ := strings.Cut(r.String(), " after ")
	return "Request Timeout: the request body arrives too slowly (less than " + rate + " on average after the first " + r.Grace.String() + "); the request was abandoned"
}

func concurrencyMessage(n int) string {
	return "Rate Limited: more than " + strconv.Itoa(n) + " concurrent requests for this credential; retry when one finishes"
}

// MinBodyRate is the slowest average rate at which a request body may
// arrive: once Grace has passed since keygate began to read it, a body
// whose bytes so far average less than BytesPerSecond gets 408 and its
// upstream request is aborted. In YAML it is written "1KiB/s after 10s"
// (units B, KB, KiB, MB, MiB), or "off". The zero value is off.
type MinBodyRate struct {
	BytesPerSecond int64
	Grace          time.Duration
}

// On reports whether the rate is enforced.
func (r MinBodyRate) On() bool { return r.BytesPerSecond > 0 }

// slow reports whether n bytes in elapsed fall below the rate.
func (r MinBodyRate) slow(n int64, elapsed time.Duration) bool {
	return r.On() && elapsed >= r.Grace && float64(n) < float64(r.BytesPerSecond)*elapsed.Seconds()
}

var rateUnits = []struct {
	name string
	n    int64
}{{"MiB", 1 << 20}, {"KiB", 1 << 10}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}

// String is the rate as YAML writes it.
func (r MinBodyRate) String() string {
	if !r.On() {
		return "off"
	}
	for _, u := range rateUnits {
		if r.BytesPerSecond%u.n == 0 {
			return strconv.FormatInt(r.BytesPerSecond/u.n, 10) + u.name + "/s after " + r.Grace.String()
		}
	}
	return strconv.FormatInt(r.BytesPerSecond, 10) + "B/s after " + r.Grace.String()
}

// MarshalText writes the rate as String does.
func (r MinBodyRate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalYAML reads the rate as UnmarshalText does; an error names the
// line, which package config turns into the field's path.
func (r *MinBodyRate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a rate such as \"1KiB/s after 10s\", or \"off\"", n.Line)}}
	}
	if err := r.UnmarshalText([]byte(n.Value)); err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}

// UnmarshalText reads "<size>/s after <duration>" or "off".
func (r *MinBodyRate) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "off" || s == "0" {
		*r = MinBodyRate{}
		return nil
	}
	rate, grace, ok := strings.Cut(s, " after ")
	rate, perSecond := strings.CutSuffix(strings.TrimSpace(rate), "/s")
	if !ok || !perSecond {
		return fmt.Errorf("%q: want a rate and a grace period such as \"1KiB/s after 10s\", or \"off\"", s)
	}
	unit := int64(1)
	for _, u := range rateUnits {
		if v, found := strings.CutSuffix(rate, u.name); found {
			rate, unit = strings.TrimSpace(v), u.n
			break
		}
	}
	n, err := strconv.ParseInt(rate, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/unit {
		return fmt.Errorf("%q: the rate must be a positive whole number of B, KB, KiB, MB or MiB per second", s)
	}
	d, err := time.ParseDuration(strings.TrimSpace(grace))
	if err != nil || d < time.Second || d > 24*time.Hour {
		return fmt.Errorf("%q: the grace period must be a duration between 1s and 24h", s)
	}
	*r = MinBodyRate{BytesPerSecond: n * unit, Grace: d}
	return nil
}
