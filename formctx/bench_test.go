package formctx

import (
	"bytes"
	"io"
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
