// Package statuswriter remembers the status of a response and the bytes
// of its body, for the one log line per request that the admin API, the
// portal and the plain-HTTP listener write.
package statuswriter

import "net/http"

// Writer is an http.ResponseWriter that remembers the first status
// written (200 when the body comes first).
type Writer struct {
	http.ResponseWriter
	status int
	bytes  int64
}

// Wrap wraps w.
func Wrap(w http.ResponseWriter) *Writer { return &Writer{ResponseWriter: w} }

// WriteHeader records code and passes it on.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records 200 when nothing was written before.
func (w *Writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Bytes is how many bytes of the body were written so far.
func (w *Writer) Bytes() int64 { return w.bytes }

// Status is the status written so far; 0 for none.
func (w *Writer) Status() int { return w.status }

// Unwrap lets http.ResponseController reach the wrapped writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
