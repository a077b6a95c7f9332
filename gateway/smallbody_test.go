package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestSmallAndStreamedBodiesAnswerAlike sends each body twice: with its
// length (a small body, checked whole before it is sent) and chunked (no
// length, so streamed as it is checked). Both paths must give the same
// status, and forward the same bytes on success. A tiny file gives a body
// held in memory of its own, a 20 KiB one a body held in a pooled buffer.
func TestSmallAndStreamedBodiesAnswerAlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, size := range []int{200, 20 << 10} {
		t.Run(fmt.Sprintf("%dB file", size), func(t *testing.T) {
			t.Parallel()
			smallAndStreamedAlike(t, e, strings.Repeat("z", size))
		})
	}
}

func smallAndStreamedAlike(t *testing.T, e *env, file string) {
	cases := []struct {
		name   string
		parts  []part
		status int
	}{
		{"context first", []part{{"contextId", ctxA}, {"id", "1"}, {"files", file}}, 200},
		{"context after the file", []part{{"files", file}, {"id", "1"}, {"contextId", ctxA}}, 200},
		{"a second context after the file", []part{{"contextId", ctxA}, {"files", file}, {"contextID", ctxB}}, 400},
		{"the same context twice", []part{{"contextId", ctxA}, {"files", file}, {"contextId", ctxA}}, 200},
		{"another key's context", []part{{"contextId", ctxB}, {"files", file}}, 403},
	}
	for _, c := range cases {
		for _, streamed := range []bool{false, true} {
			name := c.name + "/small"
			if streamed {
				name = c.name + "/streamed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ct, body := form(t, c.parts...)
				var rd io.Reader = bytes.NewReader(body)
				if streamed {
					rd = io.MultiReader(rd) // hides the length: sent chunked
				}
				r := e.do(e.request("POST", "/sync", e.LiveKey, ct, rd))
				if r.Status != c.status {
					t.Fatalf("status %d, want %d: %.200s", r.Status, c.status, r.Body)
				}
				if c.status == 200 && r.Echo.SHA256 != sha(body) {
					t.Error("body not forwarded byte-exact")
				}
			})
		}
	}
}

// TestTruncatedSmallBody: a body shorter than its Content-Length is the
// client's fault whichever path it takes.
func TestTruncatedSmallBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ct, body := form(t, part{"contextId", ctxA}, part{"files", "abc"})
	req := e.request("POST", "/sync", e.LiveKey, ct, bytes.NewReader(body[:len(body)-10]))
	req.ContentLength = int64(len(body))
	r := e.do(req)
	if r.Status < 400 || r.Status >= 500 {
		t.Fatalf("status %d, want a 4xx: %.200s", r.Status, r.Body)
	}
}
