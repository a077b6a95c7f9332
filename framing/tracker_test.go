package framing

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/textproto"
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
			// On a stream that ends cleanly every request sound so far
			// was fed whole; after a refused head nothing more counts.
			if tt.reason == "" && (!tr.Whole(tt.heads-1) || tr.Whole(tt.heads)) {
				t.Errorf("%s (step %d): %d requests whole, want %d", tt.name, step, tr.whole.Load(), tt.heads)
			}
			if tt.reason != "" && tr.whole.Load() > tt.heads {
				t.Errorf("%s (step %d): %d requests whole after %d sound heads", tt.name, step, tr.whole.Load(), tt.heads)
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

// TestTrackerWhole: a request counts as whole only once the last byte of
// its body arrived, however the bytes were split; a head alone (a client
// waiting for 100 Continue, say) is not a whole request.
func TestTrackerWhole(t *testing.T) {
	t.Parallel()
	expect := "POST /sync HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
	tests := []struct {
		name  string
		in    string
		whole int64
	}{
		{"no body", get, 1},
		{"content-length body", postCL, 1},
		{"content-length body but its last byte", postCL[:len(postCL)-1], 0},
		{"head only, waiting for 100 Continue", expect, 0},
		{"then the body", expect + "hello", 1},
		{"chunked body", postChunk, 1},
		{"chunked but the final CRLF", postChunk[:len(postChunk)-2], 0},
		{"chunked but the last chunk", postChunk[:len(postChunk)-5], 0},
		{"chunked with trailers", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nT: 1\r\n\r\n", 1},
		{"chunked, in the trailers", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nT: 1\r\n", 0},
		{"content-length 0", "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 1},
		{"pipelined, the second's body short", postCL + postCL[:len(postCL)-2], 1},
		{"pipelined", postCL + postChunk + get, 3},
		{"a refused head's body", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 0},
	}
	for _, tt := range tests {
		for _, step := range []int{0, 1, 3, 7} {
			if got := feed(tt.in, step).whole.Load(); got != tt.whole {
				t.Errorf("%s (step %d): %d requests whole, want %d", tt.name, step, got, tt.whole)
			}
		}
	}
}

// netRequest is one request as net/http's server read it: where its head
// starts and ends, and where its body, read to its end, ends (-1 when
// reading it failed).
type netRequest struct{ start, end, bodyEnd int }

// netHTTPRead reads s as net/http's server reads a connection's
// requests: http.ReadRequest, each body read to its end, up to four CR or
// LF skipped after a POST, and stops where the server would close the
// connection (a request or body it refuses, a version other than 1.x, an
// HTTP/1.1 request without exactly one Host, Connection: close). It
// returns the requests it read and the read error that stopped it, if
// any. With needMore, reading past the end of s fails with errNeedMore
// rather than io.EOF.
func netHTTPRead(s string, needMore bool) (reqs []netRequest, stop error) {
	var src io.Reader = strings.NewReader(s)
	if needMore {
		src = needMoreReader{strings.NewReader(s)}
	}
	cr := &countingReader{r: src}
	br := bufio.NewReaderSize(cr, 4096)
	pos := func() int { return cr.n - br.Buffered() }
	post := false
	for {
		if post {
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			_, _ = br.Discard(n)
		}
		start := pos()
		req, err := http.ReadRequest(br)
		if err != nil {
			return reqs, err
		}
		if req.ProtoMajor != 1 {
			return reqs, nil
		}
		// ReadRequest drops the Host header (into req.Host); the server
		// refuses an HTTP/1.1 request without exactly one.
		h := headOf(s[start:pos()])
		if h == nil || (req.ProtoAtLeast(1, 1) && len(h["Host"]) != 1) {
			return reqs, nil
		}
		reqs = append(reqs, netRequest{start: start, end: pos(), bodyEnd: -1})
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return reqs, err
		}
		reqs[len(reqs)-1].bodyEnd = pos()
		if req.Close {
			return reqs, nil
		}
		post = req.Method == http.MethodPost
	}
}

// netHTTPMessages is netHTTPRead's requests: where each head starts and
// ends in s, and where each body read without error ends.
func netHTTPMessages(s string) (starts, ends, bodyEnds []int) {
	reqs, _ := netHTTPRead(s, false)
	for _, r := range reqs {
		starts, ends = append(starts, r.start), append(ends, r.end)
		if r.bodyEnd >= 0 {
			bodyEnds = append(bodyEnds, r.bodyEnd)
		}
	}
	return starts, ends, bodyEnds
}

// errNeedMore is needMoreReader's error at the end of its bytes.
var errNeedMore = errors.New("read past the bytes given")

// needMoreReader is a strings.Reader that tells running out of bytes
// apart from everything else: it returns errNeedMore instead of io.EOF.
type needMoreReader struct{ r *strings.Reader }

func (n needMoreReader) Read(p []byte) (int, error) {
	k, err := n.r.Read(p)
	if err == io.EOF {
		err = errNeedMore
	}
	return k, err
}

// netHTTPNeedsMore reports whether net/http, reading the requests in s,
// asks for a byte past the end of s while it reads the i-th request, its
// head or its body.
func netHTTPNeedsMore(s string, i int) bool {
	reqs, stop := netHTTPRead(s, true)
	// The read stopped on request i: at its head (i requests read) or at
	// its body (i+1, the last one unfinished).
	stoppedAtI := len(reqs) == i || (len(reqs) == i+1 && reqs[i].bodyEnd < 0)
	return stoppedAtI && errors.Is(stop, errNeedMore)
}

// headOf reads the header fields of a request head with net/textproto;
// nil when they do not parse.
func headOf(head string) textproto.MIMEHeader {
	tp := textproto.NewReader(bufio.NewReader(strings.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil
	}
	return h
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// trackerHeads feeds s to a Tracker a byte at a time and returns it and
// where each head it found sound starts (its request line) and ends in s.
func trackerHeads(s string) (t *Tracker, starts, ends []int) {
	t, starts, ends, _ = trackerMessages(s)
	return t, starts, ends
}

// trackerMessages is trackerHeads, and where each request the tracker
// counts as whole ends in s.
func trackerMessages(s string) (t *Tracker, starts, ends, wholeEnds []int) {
	t = &Tracker{}
	lineStart := 0
	for i := 0; i < len(s); i++ {
		inHead, lineEnds := t.phase == phHead, s[i] == '\n'
		before := inHead && !t.inHead
		_, _ = t.Write([]byte{s[i]})
		if before && t.inHead { // a request line just ended
			starts = append(starts, lineStart)
		}
		if (inHead && lineEnds) || (!inHead && t.phase == phHead) { // a line, or a body, ended
			lineStart = i + 1
		}
		if h := int(t.heads.Load()); h > len(ends) {
			ends = append(ends, i+1)
		}
		if w := int(t.whole.Load()); w > len(wholeEnds) {
			wholeEnds = append(wholeEnds, i+1)
		}
	}
	return t, starts, ends, wholeEnds
}

// FuzzTracker holds the tracker against net/http over pipelined requests
// with Content-Length and chunked bodies: whenever the tracker finds the
// head of the i-th request on a connection sound (Guard lets it through),
// net/http's i-th request must be the same bytes (its head starts and
// ends where the tracker's does), and that head must not carry both Content-Length and
// Transfer-Encoding (read with net/textproto). Where the tracker refuses a
// head, the connection is closed, so nothing after it matters. Split
// reads never change the verdicts.
func FuzzTracker(f *testing.F) {
	for _, s := range []string{get, postCL, postChunk, postChunk + get, postCL + postChunk + get,
		postCL + "\r\n" + postChunk + "\n" + get,
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: 1\r\n\r\n" + get,
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1c\r\nGET /x HTTP/1.1\r\nHost: y\r\n\r\n\r\n0\r\n\r\n" + get,
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 28\r\n\r\nGET /x HTTP/1.1\r\nHost: y\r\n\r\n" + get,
		"POST / HTTP/1.0\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nab" + get,
		"POST / HTTP/1.1\nHost: x\nContent-Length: 2\n\nab" + get,
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nA \r\n0123456789\r\n0\r\n\r\n" + postCL,
	} {
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
		// The same requests as net/http, as far as the tracker lets them
		// through.
		tr, tStarts, tEnds, tWhole := trackerMessages(s)
		nStarts, nEnds, nBodyEnds := netHTTPMessages(s)
		for i := range nEnds {
			if ok, _ := tr.Check(int64(i)); !ok {
				break
			}
			if ok, _ := whole.Check(int64(i)); !ok {
				t.Fatalf("head %d: sound read a byte at a time, refused read whole", i)
			}
			if tStarts[i] != nStarts[i] || tEnds[i] != nEnds[i] {
				t.Fatalf("request %d: the tracker's head is bytes %d-%d, net/http's %d-%d, in %q", i, tStarts[i], tEnds[i], nStarts[i], nEnds[i], s)
			}
			if h := headOf(s[nStarts[i]:nEnds[i]]); len(h["Content-Length"]) > 0 && len(h["Transfer-Encoding"]) > 0 {
				t.Fatalf("request %d with Content-Length and Transfer-Encoding let through: %q", i, s[nStarts[i]:nEnds[i]])
			}
			// A request the tracker counts as whole is one whose body
			// net/http reads to its end within the bytes fed so far, so
			// that reading it never waits for more (BodyBuffered).
			if i < len(tWhole) && i < len(nBodyEnds) && tWhole[i] != nBodyEnds[i] {
				t.Fatalf("request %d: whole at byte %d for the tracker, its body ends at %d for net/http, in %q", i, tWhole[i], nBodyEnds[i], s)
			}
			// Whatever net/http makes of the body (it may refuse it), it
			// never needs a byte past where the tracker counted it whole:
			// else a client could hold a request that no watch times out.
			if i < len(tWhole) && netHTTPNeedsMore(s[:tWhole[i]], i) {
				t.Fatalf("request %d: whole for the tracker at byte %d, but net/http reads past it, in %q", i, tWhole[i], s)
			}
			if i < len(nBodyEnds) && i >= len(tWhole) && i < int(tr.heads.Load()) && tr.phase != phStopped {
				t.Fatalf("request %d: its body ends at byte %d for net/http, but the tracker never counted it whole, in %q", i, nBodyEnds[i], s)
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
