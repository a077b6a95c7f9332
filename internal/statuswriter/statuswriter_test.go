package statuswriter_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keygate/keygate/internal/statuswriter"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name  string
		do    func(w http.ResponseWriter)
		want  int
		bytes int64
	}{
		{"nothing", func(http.ResponseWriter) {}, 0, 0},
		{"body first", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200, 1},
		{"header then body", func(w http.ResponseWriter) { w.WriteHeader(404); _, _ = w.Write([]byte("xy")) }, 404, 2},
		{"first header wins", func(w http.ResponseWriter) { w.WriteHeader(503); w.WriteHeader(200) }, 503, 0},
		{"body in pieces", func(w http.ResponseWriter) { _, _ = w.Write([]byte("abc")); _, _ = w.Write([]byte("de")) }, 200, 5},
	} {
		rec := httptest.NewRecorder()
		w := statuswriter.Wrap(rec)
		tc.do(w)
		if w.Status() != tc.want || w.Bytes() != tc.bytes {
			t.Errorf("%s: status %d, %d bytes; want %d, %d", tc.name, w.Status(), w.Bytes(), tc.want, tc.bytes)
		}
	}
}
