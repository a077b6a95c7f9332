package formctx

import (
	"bytes"
	"errors"
	"fmt"
	"mime/multipart"
	"strings"
	"testing"
)

// FuzzRead feeds arbitrary bodies and boundaries to Read. It must never
// panic or hang. When Read refuses, the error is an *Error. When Read
// succeeds, reading the Body to its end must yield exactly the input, or
// fail with an *Error after a strict prefix of it. And whatever formctx
// accepts, Go's own mime/multipart ReadForm on the same bytes must either
// fail or read the same context in every context-named field (and in at
// least one).
//
// The seed corpus is testdata/fuzz/FuzzRead (the adversarial corpus among
// it) plus the bodies below.
func FuzzRead(f *testing.F) {
	seed := func(body []byte, ct string) {
		boundary, _ := formBoundary(ct)
		f.Add(body, boundary, uint32(0), uint16(0))
		f.Add(body, boundary, uint32(len(body)), uint16(64))
	}
	seed(build(f, ctxField("contextId", testCtx), idField(), fileField(500)))
	seed(build(f, fileField(3000), ctxField("contextID", testCtx)))
	seed(build(f, ctxField("contextId", testCtx), fileField(100), ctxField("contextID", otherCtx)))
	seed(curlBody(fileField(200), idField(), ctxField("contextId", testCtx)))
	body, ct := curlBody(ctxField("contextId", testCtx), fileField(200))
	seed(body[:len(body)-10], ct)
	seed(append(body, "epilogue"...), ct)
	f.Add([]byte("--b\nContent-Disposition: form-data; name=\"contextid\"\n\nx\n--b--"), "b", uint32(0), uint16(1))
	f.Add([]byte("garbage"), "", uint32(3), uint16(0))

	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, boundary string, maxBytes uint32, memBytes uint16) {
		ct := "multipart/form-data; boundary=\"" + boundary + "\""
		cfg := Config{MaxBytes: int64(maxBytes), MemoryBytes: int(memBytes), TempDir: dir}
		if cfg.MaxBytes == 0 {
			cfg.MaxBytes = 1 << 20
		}
		b, err := Read(bytes.NewReader(data), ct, cfg)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Read error %v (%T) is not an *Error", err, err)
			}
			return
		}
		defer b.Close()
		out, err := drain(b, 1+len(data)%700)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Body.Read error %v (%T) is not an *Error", err, err)
			}
			if len(out) >= len(data) || !bytes.Equal(out, data[:len(out)]) {
				t.Fatalf("after %q Body yielded %d bytes, not a strict prefix of the %d-byte input", fe.Message, len(out), len(data))
			}
			return
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("Body yielded %d bytes that differ from the %d-byte input", len(out), len(data))
		}
		if why := goDisagrees(data, boundary, b.Context()); why != "" {
			t.Fatalf("formctx accepted context %q but mime/multipart %s", b.Context(), why)
		}
	})
}

// goDisagrees parses data with mime/multipart's ReadForm, as an upstream
// calling ParseMultipartForm would, and says how it disagrees with formctx
// having read ctx; "" if it fails or agrees.
func goDisagrees(data []byte, boundary, ctx string) string {
	form, err := multipart.NewReader(bytes.NewReader(data), boundary).ReadForm(1 << 20)
	if err != nil {
		return ""
	}
	defer form.RemoveAll()
	n := 0
	for k, vs := range form.Value {
		if !EqualContext(k, "contextid") {
			continue
		}
		for _, v := range vs {
			if v != ctx {
				return fmt.Sprintf("reads %s=%q", k, v)
			}
			n++
		}
	}
	for k := range form.File {
		if EqualContext(k, "contextid") {
			return "reads a context file part " + k
		}
	}
	if n == 0 {
		return "reads no context"
	}
	return ""
}

// FuzzDisposition fuzzes the part headers of a two-part body whose first
// part carries the bound context: the Content-Disposition values, one more
// header line per part and the second part's value. Whatever formctx
// accepts must come out byte-exact, and Go's ReadForm must fail or read the
// context formctx read in every context field.
func FuzzDisposition(f *testing.F) {
	f.Add(`form-data; name="contextId"`, "", `form-data; name="files"; filename="a.pdf"`, "Content-Type: application/pdf", "%PDF")
	f.Add(`form-data; name=contextId`, "Content-Type: text/plain; charset=utf-8", `form-data; name*=utf-8''contextID`, "", testCtx)
	f.Add(`form-data; name="contextId"`, "Content-Transfer-Encoding: 8bit", `attachment; name="contextId"`, "", otherCtx)
	f.Add(`form-data; name="contextId"`, "", `form-data; name="x"; filename="a\"; name="contextId"`, "", otherCtx)
	f.Add(`form-data; name="contextId"`, "", `form-data; name*0="context"; name*1="Id"`, "", otherCtx)
	f.Add(`form-data; name="contextId"`, "", `form-data; name="contextId"`, "Content-Transfer-Encoding: quoted-printable", testCtx+"=\r\n")
	const bnd = "fuzzBoundary42"
	f.Fuzz(func(t *testing.T, cd1, h1, cd2, h2, v2 string) {
		var sb strings.Builder
		part := func(cd, h, v string) {
			sb.WriteString("--" + bnd + "\r\nContent-Disposition: " + cd + "\r\n")
			if h != "" {
				sb.WriteString(h + "\r\n")
			}
			sb.WriteString("\r\n" + v + "\r\n")
		}
		part(cd1, h1, testCtx)
		part(cd2, h2, v2)
		sb.WriteString("--" + bnd + "--\r\n")
		data := []byte(sb.String())
		b, err := Read(bytes.NewReader(data), "multipart/form-data; boundary="+bnd, Config{MaxBytes: 1 << 20})
		if err != nil {
			return
		}
		defer b.Close()
		out, err := drain(b, 1+len(data)%300)
		if err != nil {
			if len(out) >= len(data) {
				t.Fatalf("refused (%v) after yielding the whole body", err)
			}
			return
		}
		if !bytes.Equal(out, data) {
			t.Fatal("Body yielded bytes that differ from the input")
		}
		if why := goDisagrees(data, bnd, b.Context()); why != "" {
			t.Fatalf("formctx accepted %q but mime/multipart %s", data, why)
		}
	})
}

// FuzzFind checks the boundary search (rare byte, then bndm, then
// bytes.Index on the anchor) against bytes.Index for any boundary, data
// and starting point.
func FuzzFind(f *testing.F) {
	f.Add("----WebKitFormBoundary7MA4YWxkTrZu0gW", []byte("%PDF-1.7 ------WebKitFormBoundary7MA4YWxkTrZu0gW\r\n"), uint16(0))
	f.Add(curlBoundary, bytes.Repeat([]byte("0123456789abcdef--"), 200), uint16(3))
	f.Add("Z", []byte("ZZZ--Z"), uint16(1))
	f.Fuzz(func(t *testing.T, boundary string, data []byte, from uint16) {
		if boundary == "" || len(boundary) > 70 {
			return
		}
		var p parser
		p.init(boundary, data, nil, 0, new([256]uint64))
		p.end = len(data)
		start := int(from) % (len(data) + 1)
		want := bytes.Index(data[start:], p.dash)
		if want >= 0 {
			want += start
		}
		if got := p.find(start); got != want {
			t.Fatalf("find(%d) = %d, bytes.Index says %d", start, got, want)
		}
	})
}
