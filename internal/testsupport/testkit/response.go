package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/keygate/keygate/standin"
)

// Result is a whole response as the tests look at it: a 200 decoded as the
// stand-in's Echo of what reached the upstream, anything else as the
// spec's error body.
type Result struct {
	Status int
	Proto  int // 1 or 2
	Header http.Header
	Body   []byte
	Echo   standin.Echo
	Err    struct {
		StateText string
		TraceId   string
		Messages  []string
	}
}

// Do sends req with c and reads the whole response, failing the test if
// the request cannot be made.
func Do(t testing.TB, c *http.Client, req *http.Request) Result {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := Result{Status: resp.StatusCode, Proto: resp.ProtoMajor, Header: resp.Header, Body: b}
	if resp.StatusCode == http.StatusOK {
		_ = json.Unmarshal(b, &r.Echo)
	} else {
		_ = json.Unmarshal(b, &r.Err)
	}
	return r
}
