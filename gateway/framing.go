package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// RefuseFraming returns the answer to a request whose HTTP/1 framing
// keygate refuses (package framing: Content-Length with Transfer-Encoding,
// a Transfer-Encoding other than chunked, a folded header line, or framing
// that could not be followed): 400 with the spec's JSON body and
// "Connection: close", so nothing after it on the connection is read. It is
// logged as a request with reason "framing" and counted in refused, if set,
// by listener. Nothing is forwarded.
func RefuseFraming(log *zap.Logger, listener string, refused *prometheus.CounterVec) func(http.ResponseWriter, *http.Request, string) {
	if log == nil {
		log = zap.NewNop()
	}
	var c prometheus.Counter
	if refused != nil {
		c = refused.WithLabelValues(listener)
	}
	return func(w http.ResponseWriter, r *http.Request, reason string) {
		tr := newTrace(r.Header.Get("Traceparent"))
		// Answered at once, and what net/http still reads of the body
		// after the answer is bounded in time.
		closeUnreadBody(w, true)
		WriteError(w, tr.ID, http.StatusBadRequest, "Bad Request: ambiguous message framing: "+reason)
		if c != nil {
			c.Inc()
		}
		path := r.URL.Path
		if len(path) > 64 {
			path = path[:64] + "..."
		}
		log.Info("request",
			zap.String("trace_id", tr.ID),
			zap.String("method", r.Method),
			zap.String("path", path),
			zap.String("listener", listener),
			zap.Int("status", http.StatusBadRequest),
			zap.String("remote", r.RemoteAddr),
			zap.String("reason", "framing"),
			zap.String("error", reason))
	}
}

// NewFramingCounter creates and registers keygate_framing_refused_total.
func NewFramingCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_framing_refused_total",
		Help: "Requests refused with 400 for ambiguous HTTP/1 framing (Content-Length with Transfer-Encoding, ...), by listener (api, plain_http); the connection is closed.",
	}, []string{"listener"})
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}
