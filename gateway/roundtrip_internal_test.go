package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRoundTripLeavesTheRequestAlone: the gateway's RoundTrippers never
// change the request they are given (net/http's RoundTripper contract):
// after a round trip of a streamed body, with a body read whole by
// readSmall, and after a retry on a refused connection, the caller's
// request still has its own body, and the upstream got the whole body.
func TestRoundTripLeavesTheRequestAlone(t *testing.T) {
	t.Parallel()
	got := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := "http://" + ln.Addr().String() // refuses connections once closed
	ln.Close()
	cases := []struct {
		name    string
		targets []string
		small   bool
	}{
		{"streamed body", []string{srv.URL}, false},
		{"streamed body, first target refuses the connection", []string{l, srv.URL}, false},
		{"body read whole", []string{srv.URL}, true},
	}
	for _, c := range cases {
		up, err := newUpstream("extraction", UpstreamConfig{Targets: c.targets})
		if err != nil {
			t.Fatal(err)
		}
		var body io.ReadCloser = io.NopCloser(strings.NewReader("hello"))
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.targets[0]+"/x", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 5
		if c.small {
			memBody(req, &smallBuf{b: []byte("hello")})
			body = req.Body
		}
		getBody := req.GetBody
		resp, err := up.transport.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if req.Body != body || (req.GetBody == nil) != (getBody == nil) {
			t.Errorf("%s: the round trip changed the caller's request body", c.name)
		}
		if b := <-got; b != "hello" {
			t.Errorf("%s: the upstream got %q", c.name, b)
		}
	}
}
