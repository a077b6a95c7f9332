package differential

import (
	"testing"
)

// FuzzDifferential mutates the corpus (Content-Type and body) and sends
// each input through keygate: for every input keygate forwards, Go,
// werkzeug and busboy each refuse it or read only the bound context, and
// the upstream receives the body byte for byte; every refusal is a 4xx in
// the spec's shape.
func FuzzDifferential(f *testing.F) {
	for _, c := range corpus(f) {
		f.Add(c.ct, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		setup(t)
		o := send(t, contentType, body)
		if err := check(body, o); err != nil {
			t.Fatal(err)
		}
	})
}
