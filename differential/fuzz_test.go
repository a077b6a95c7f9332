package differential

import (
	"strings"
	"testing"
)

// FuzzDifferential mutates the corpus (Content-Type and body) and sends
// each input through keygate: for every input keygate forwards, Go,
// werkzeug and busboy each refuse it or read only the bound context, and
// the upstream receives the body byte for byte; every refusal is a 4xx in
// the spec's shape.
func FuzzDifferential(f *testing.F) {
	for _, c := range corpus(f) {
		body := c.body
		if c.bound != "" { // formctx's cases: bind them to boundCtx too
			body = strings.ReplaceAll(body, c.bound, boundCtx)
		}
		f.Add(c.ct, []byte(body))
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		if !validHeaderValue(contentType) {
			return // no client can send it; keygate never sees it
		}
		setup(t)
		o := send(t, boundCtx, contentType, body)
		if err := check(boundCtx, body, o); err != nil {
			t.Fatal(err)
		}
	})
}

// validHeaderValue reports whether s can be sent as a header value: no
// control characters but HTAB (net/http refuses to send others).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
