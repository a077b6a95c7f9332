package formctx

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func benchRead(b *testing.B, body []byte, ct string) {
	cfg := Config{MaxBytes: 64 * mib, TempDir: b.TempDir()}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		fb, err := Read(bytes.NewReader(body), ct, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, fb); err != nil {
			b.Fatal(err)
		}
		fb.Close()
	}
}

func BenchmarkReadContextFirst1MiB(b *testing.B) {
	benchRead(b, first(curlBody(ctxField("contextId", testCtx), idField(), fileField(mib))), "multipart/form-data; boundary="+curlBoundary)
}

func BenchmarkReadContextLast1MiB(b *testing.B) {
	benchRead(b, first(curlBody(fileField(mib), idField(), ctxField("contextId", testCtx))), "multipart/form-data; boundary="+curlBoundary)
}

func BenchmarkReadContextLast16MiB(b *testing.B) {
	benchRead(b, first(curlBody(fileField(16*mib), idField(), ctxField("contextId", testCtx))), "multipart/form-data; boundary="+curlBoundary)
}

// BenchmarkReadSmall256B is the issue 8 small request: a 256-byte body with
// the context first and a small file after it.
func BenchmarkReadSmall256B(b *testing.B) {
	const bnd = "b256"
	head := "--" + bnd + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx +
		"\r\n--" + bnd + "\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a\"\r\n\r\n"
	tail := "\r\n--" + bnd + "--\r\n"
	body := []byte(head + strings.Repeat("x", 256-len(head)-len(tail)) + tail)
	benchRead(b, body, "multipart/form-data; boundary="+bnd)
}
