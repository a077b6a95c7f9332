package framing

import (
	"strings"
	"testing"
)

// feed writes s to a new Tracker in pieces of size step (all at once for
// step 0) and returns it.
func feed(s string, step int) *Tracker {
	t := &Tracker{}
	if step <= 0 {
		_, _ = t.Write([]byte(s))
		return t
	}
	for len(s) > 0 {
		k := min(step, len(s))
		_, _ = t.Write([]byte(s[:k]))
		s = s[k:]
	}
	return t
}

const (
	get       = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	postCL    = "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
	postChunk = "POST /sync HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
)

func TestTracker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		heads  int64  // sound heads
		reason string // reason for the head after them; "" when the stream ends cleanly
	}{
		{"content-length only", postCL + get, 2, ""},
		{"chunked only", postChunk + get, 2, ""},
		{"no body", get + get + get, 3, ""},
		{"CL then TE", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get, 0, ReasonCLAndTE},
		{"TE then CL", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + get, 0, ReasonCLAndTE},
		{"CL and TE, odd case", "POST / HTTP/1.1\r\ntransfer-ENCODING: chunked\r\ncontent-LENGTH: 0\r\n\r\n", 0, ReasonCLAndTE},
		{"CL and TE after a sound request", get + "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 1, ReasonCLAndTE},
		{"two TE", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 0, ReasonManyTE},
		{"TE chunked, identity", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 0, ReasonTE},
		{"TE gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 0, ReasonTE},
		{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 0, ReasonTE10},
		{"two CL", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 0, ReasonManyCL},
		{"CL with sign", "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx", 0, ReasonCL},
		{"CL list", "POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\nx", 0, ReasonCL},
		{"obs-fold", "POST / HTTP/1.1\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n", 0, ReasonFold},
		{"space before colon", "POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", 0, ReasonHeaderSyntax},
		{"bare CR in a header", "POST / HTTP/1.1\r\nX-A: 1\rTransfer-Encoding: chunked\r\n\r\n", 0, ReasonHeaderSyntax},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, ReasonVersion},
		{"HTTP/1.0 with CL", "POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\nab" + get, 2, ""},
		{"LF-only lines", "POST / HTTP/1.1\nContent-Length: 2\n\nab" + get, 2, ""},
		{"leading CRLF", postCL + "\r\n" + get, 2, ""},
		{"chunk extensions", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b;c=\"d\"\r\nhello\r\n3 \r\nabc\r\n0;x\r\n\r\n" + get, 2, ""},
		{"trailers", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\nX-Api-Key: k\r\nTrailer-B: 2\r\n\r\n" + get, 2, ""},
		{"hidden request in a chunk", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1c\r\nGET /x HTTP/1.1\r\nHost: y\r\n\r\n\r\n0\r\n\r\n" + get, 2, ""},
		{"hidden request in a CL body", "POST / HTTP/1.1\r\nContent-Length: 28\r\n\r\nGET /x HTTP/1.1\r\nHost: y\r\n\r\n" + get, 2, ""},
		{"chunk without CRLF after data", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n" + get, 1, ReasonLost},
		{"chunk size with bare LF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\na\r\n0\r\n\r\n" + get, 1, ReasonLost},
		{"chunk size not hex", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n" + get, 1, ReasonLost},
		{"long request target", "GET /" + strings.Repeat("a", 10000) + " HTTP/1.1\r\n\r\n" + get, 2, ""},
		{"long header", "GET / HTTP/1.1\r\nX-A: " + strings.Repeat("b", 10000) + "\r\n\r\n" + get, 2, ""},
	}
	for _, tt := range tests {
		for _, step := range []int{0, 1, 3, 7} {
			tr := feed(tt.in, step)
			for i := range tt.heads {
				if ok, reason := tr.Check(i); !ok {
					t.Errorf("%s (step %d): head %d refused: %s", tt.name, step, i, reason)
				}
			}
			ok, reason := tr.Check(tt.heads)
			want := tt.reason
			if want == "" {
				want = ReasonLost // nothing more was sent
			}
			if ok || reason != want {
				t.Errorf("%s (step %d): head %d = %v %q, want refused %q", tt.name, step, tt.heads, ok, reason, want)
			}
		}
	}
}

func FuzzTracker(f *testing.F) {
	for _, s := range []string{get, postCL, postChunk, postChunk + get,
		"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: 1\r\n\r\n"} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, s string, step uint8) {
		whole, pieces := feed(s, 0), feed(s, int(step%16))
		// Split reads never change the verdicts.
		for i := int64(0); i < 64; i++ {
			ok1, r1 := whole.Check(i)
			ok2, r2 := pieces.Check(i)
			if ok1 != ok2 || r1 != r2 {
				t.Fatalf("head %d: whole %v %q, pieces %v %q", i, ok1, r1, ok2, r2)
			}
			if !ok1 {
				break
			}
		}
		// A request with both Content-Length and Transfer-Encoding in its
		// head is never accepted as the first one.
		head, _, _ := strings.Cut(s, "\r\n\r\n")
		lower := strings.ToLower(head)
		if strings.Contains(lower, "\ncontent-length:") && strings.Contains(lower, "\ntransfer-encoding:") && !strings.Contains(head, "\n\n") && !strings.HasPrefix(s, "\r\n") && !strings.HasPrefix(s, "\n") {
			if ok, _ := whole.Check(0); ok {
				t.Fatalf("head with CL and TE accepted: %q", head)
			}
		}
	})
}

// BenchmarkTracker is the cost the framing check adds to reading a
// connection: a typical /sync request (head and a 64 KiB body) read in
// 4 KiB pieces, as net/http's bufio.Reader reads it.
func BenchmarkTracker(b *testing.B) {
	body := strings.Repeat("x", 64<<10)
	req := []byte("POST /sync HTTP/1.1\r\nHost: gw\r\nX-Api-Key: svc_live_0123456789abcdefghijklmnopqrstuvwxyz\r\nContent-Type: multipart/form-data; boundary=b\r\nUser-Agent: bench\r\nAccept: */*\r\nContent-Length: 65536\r\n\r\n" + body)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	var t Tracker
	for b.Loop() {
		for p := req; len(p) > 0; {
			k := min(4096, len(p))
			_, _ = t.Write(p[:k])
			p = p[k:]
		}
	}
	if ok, _ := t.Check(0); !ok {
		b.Fatal("refused")
	}
}
