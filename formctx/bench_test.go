package formctx

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strconv"
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

// BenchmarkReadContextFirst1MiBRandom streams a 1 MiB file of random bytes
// (no near-boundary sequences, unlike fileBytes): the scan rate for a
// typical upload.
func BenchmarkReadContextFirst1MiBRandom(b *testing.B) {
	file := randomBytes(mib, 1)
	head := "--" + curlBoundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx +
		"\r\n--" + curlBoundary + "\r\nContent-Disposition: form-data; name=\"files\"; filename=\"doc.pdf\"\r\n\r\n"
	body := append(append([]byte(head), file...), "\r\n--"+curlBoundary+"--\r\n"...)
	benchRead(b, body, "multipart/form-data; boundary="+curlBoundary)
}

// BenchmarkFind measures the boundary search alone over 1 MiB of random
// bytes (compressed PDF streams look like this), of fileBytes (a
// near-boundary every 97 bytes) and of text, for the boundary shapes of
// curl, Go's mime/multipart, browsers (WebKit) and bench/peers.
func BenchmarkFind(b *testing.B) {
	random := randomBytes(mib, 3)
	text := textBytes(mib)
	for _, bnd := range []struct{ name, b string }{
		{"curl", curlBoundary},
		{"go", "3f1c8e2a9b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c"},
		{"webkit", "----WebKitFormBoundary7MA4YWxkTrZu0gW"},
		{"peers", peersBoundary},
	} {
		cases := []struct {
			name string
			data []byte
		}{{"random", random}, {"text", text}}
		if bnd.b == curlBoundary {
			cases = append(cases, struct {
				name string
				data []byte
			}{"near-boundaries", fileBytes(mib, curlBoundary)})
		}
		for _, tc := range cases {
			b.Run(bnd.name+"/"+tc.name, func(b *testing.B) {
				var p parser
				p.init(bnd.b, tc.data, nil, 0, new([256]uint64))
				p.end = len(tc.data)
				b.SetBytes(int64(len(tc.data)))
				defer reportCPU(b, len(tc.data))()
				for b.Loop() {
					if p.find(0) >= 0 {
						b.Fatal("found a boundary")
					}
				}
			})
		}
	}
}

// randomBytes is n pseudo-random bytes, the same for the same seed.
func randomBytes(n int, seed uint64) []byte {
	out := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range out {
		out[i] = byte(r.Uint32())
	}
	return out
}

// textBytes is n bytes of repeated text with letters, digits and a dash,
// as in a PDF's text or the peer benchmark's filler: most of its bytes
// occur in a boundary too.
func textBytes(n int) []byte {
	line := []byte("%PDF-1.7 benchmark payload 0123456789abcdefghijklmnopqrstuvwxyz ")
	return bytes.Repeat(line, n/len(line)+1)[:n]
}

// BenchmarkReadWhole is the gateway's small-body path: a body of a known
// length read whole into one buffer (256 B and 100 KiB, context first).
func BenchmarkReadWhole(b *testing.B) {
	for _, size := range []int{256, 100 << 10} {
		file := randomBytes(size, 2)
		head := "--" + curlBoundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx +
			"\r\n--" + curlBoundary + "\r\nContent-Disposition: form-data; name=\"files\"; filename=\"doc.pdf\"\r\n\r\n"
		body := append(append([]byte(head), file...), "\r\n--"+curlBoundary+"--\r\n"...)
		ct := "multipart/form-data; boundary=" + curlBoundary
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			cfg := Config{MaxBytes: 64 * mib, TempDir: b.TempDir()}
			buf := make([]byte, len(body))
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				fb, err := Read(bytes.NewReader(body), ct, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(fb, buf); err != nil {
					b.Fatal(err)
				}
				fb.Close()
			}
		})
	}
}

// plainReader and plainWriter hide bytes.Reader's WriteTo and io.Discard's
// ReadFrom, so io.Copy moves the bytes through its own 32 KiB buffer as it
// does between a request body and an upstream connection.
type plainReader struct{ r io.Reader }

func (p plainReader) Read(b []byte) (int, error) { return p.r.Read(b) }

type plainWriter struct{}

func (plainWriter) Write(b []byte) (int, error) { return len(b), nil }

// benchBody streams the bench/peers upload (context first, then a file of
// size bytes) through Body the way the transport does, and the same bytes
// through io.Copy alone as the baseline: what the check costs a byte is the
// difference between the two in one run.
func benchBody(b *testing.B, size int) {
	for _, fill := range []struct {
		name     string
		boundary string
		file     []byte
	}{
		{"peers", peersBoundary, textBytes(size)},
		{"text", curlBoundary, textBytes(size)},
		{"random", curlBoundary, randomBytes(size, 4)},
	} {
		bnd := fill.boundary
		head := "--" + bnd + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx +
			"\r\n--" + bnd + "\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\n" + testID +
			"\r\n--" + bnd + "\r\nContent-Disposition: form-data; name=\"files\"; filename=\"doc.pdf\"\r\nContent-Type: application/pdf\r\n\r\n"
		body := append(append([]byte(head), fill.file...), "\r\n--"+bnd+"--\r\n"...)
		ct := "multipart/form-data; boundary=" + bnd
		b.Run(fill.name+"/io.Copy", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			defer reportCPU(b, len(body))()
			for b.Loop() {
				if _, err := io.Copy(plainWriter{}, plainReader{bytes.NewReader(body)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fill.name+"/formctx", func(b *testing.B) {
			cfg := Config{MaxBytes: 64 * mib, TempDir: b.TempDir()}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			defer reportCPU(b, len(body))()
			for b.Loop() {
				fb, err := Read(plainReader{bytes.NewReader(body)}, ct, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(plainWriter{}, plainReader{fb}); err != nil {
					b.Fatal(err)
				}
				fb.Close()
			}
		})
	}
}

// peersBoundary is bench/peers' boundary; its file is textBytes.
const peersBoundary = "----keygatebench7MA4YWxkTrZu0gW"

// reportCPU reports the process's CPU time per byte of the loop it is
// deferred around ("cpu-ns/KiB"): on a shared machine wall time per op
// swings with the other load, CPU time much less.
func reportCPU(b *testing.B, size int) func() {
	start, ok := cpuTime()
	return func() {
		end, _ := cpuTime()
		if ok && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N)/float64(size)*1024, "cpu-ns/KiB")
		}
	}
}

func BenchmarkBody1MiB(b *testing.B)  { benchBody(b, mib) }
func BenchmarkBody20MiB(b *testing.B) { benchBody(b, 20*mib) }
