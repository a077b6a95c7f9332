package statuswriter_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keygate/keygate/internal/statuswriter"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(w http.ResponseWriter)
		want int
	}{
		{"nothing", func(http.ResponseWriter) {}, 0},
		{"body first", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200},
		{"header then body", func(w http.ResponseWriter) { w.WriteHeader(404); _, _ = w.Write([]byte("x")) }, 404},
		{"first header wins", func(w http.ResponseWriter) { w.WriteHeader(503); w.WriteHeader(200) }, 503},
	} {
		rec := httptest.NewRecorder()
		w := statuswriter.Wrap(rec)
		tc.do(w)
		if w.Status() != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, w.Status(), tc.want)
		}
	}
}
