package formctx

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"testing"
)

// FuzzRead feeds arbitrary bodies and boundaries to Read. It must never
// panic or hang; when Read succeeds, reading the Body to its end must yield
// exactly the input or fail with an *Error after a strict prefix of it; and
// the verdict must agree with a plain mime/multipart parse of the input.
func FuzzRead(f *testing.F) {
	seed := func(body []byte, ct string) {
		_, params, _ := mime.ParseMediaType(ct)
		f.Add(body, params["boundary"], uint32(0), uint16(0))
		f.Add(body, params["boundary"], uint32(len(body)), uint16(64))
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
		ct := mime.FormatMediaType("multipart/form-data", map[string]string{"boundary": boundary})
		if ct == "" {
			ct = "multipart/form-data; boundary=" + boundary
		}
		cfg := Config{MaxBytes: int64(maxBytes), MemoryBytes: int(memBytes), TempDir: dir}
		if cfg.MaxBytes == 0 {
			cfg.MaxBytes = 1 << 20
		}
		want := oracle(data, ct, cfg)

		b, err := Read(bytes.NewReader(data), ct, cfg)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Read error %v (%T) is not an *Error", err, err)
			}
			if want.ok {
				t.Fatalf("Read refused (%s) a body mime/multipart accepts", fe.Message)
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
			if want.ok {
				t.Fatalf("Body refused (%s) a body mime/multipart accepts", fe.Message)
			}
			return
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("Body yielded %d bytes that differ from the %d-byte input", len(out), len(data))
		}
		if !want.ok {
			t.Fatalf("Body accepted a body mime/multipart refuses: %s", want.why)
		}
		if b.Context() != want.ctx {
			t.Fatalf("Context() = %q, mime/multipart found %q", b.Context(), want.ctx)
		}
	})
}

type verdict struct {
	ok  bool
	ctx string
	why string
}

// oracle parses data with mime/multipart in one go and says whether Read
// and Body should accept it.
func oracle(data []byte, ct string, cfg Config) verdict {
	cfg, _ = cfg.withDefaults()
	boundary, ok := formBoundary(ct)
	if !ok {
		return verdict{why: "content type"}
	}
	if int64(len(data)) > cfg.MaxBytes {
		return verdict{why: "too large"}
	}
	if len(data) >= stepLimit {
		return verdict{why: "too long to judge"} // headers or preamble may pass the step limit
	}
	mr := multipart.NewReader(bytes.NewReader(data), boundary)
	var v verdict
	seen := false
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return verdict{why: err.Error()}
		}
		val, err := io.ReadAll(p)
		if err != nil {
			return verdict{why: err.Error()}
		}
		if !isContextName(p.FormName()) {
			continue
		}
		if len(val) > cfg.MaxFieldBytes {
			return verdict{why: "context too long"}
		}
		if !seen {
			if len(val) == 0 {
				return verdict{why: "empty context"}
			}
			v.ctx, seen = string(val), true
		} else if string(val) != v.ctx {
			return verdict{why: "conflict"}
		}
	}
	if !seen {
		return verdict{why: "no context"}
	}
	v.ok = true
	return v
}
