package formctx

import (
	"bytes"
	"errors"
	"fmt"
	"mime/multipart"
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
