package gateway

import (
	"net/http"
	"time"
)

// recorder remembers the status and size of a response for the access log
// and metrics. It unwraps for http.ResponseController, so flushing and
// deadlines reach the real connection.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	// headerAt is when the final header was written; for a proxied
	// request, about when the upstream's came back.
	headerAt time.Time
	// proxyErr is the failed round trip of a proxied request
	// (proxyError), answered by Proxy.forward.
	proxyErr error
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status, r.headerAt = code, time.Now()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
