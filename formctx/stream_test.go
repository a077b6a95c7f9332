package formctx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestLargeReads checks issue 8's point: Body hands out large reads, so the
// transport writes the upstream few large chunks, whether it streams the
// rest of the client body (context first) or replays the spool (context
// after the file).
func TestLargeReads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body []byte
		ct   string
	}{
		{"context first", first(curlBody(ctxField("contextId", testCtx), fileField(4*mib))), "multipart/form-data; boundary=" + curlBoundary},
		{"context after the file", first(curlBody(fileField(4*mib), ctxField("contextId", testCtx))), "multipart/form-data; boundary=" + curlBoundary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := Read(bytes.NewReader(tc.body), tc.ct, Config{MaxBytes: 8 * mib, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			const bufSize = 32 << 10
			p := make([]byte, bufSize)
			var out bytes.Buffer
			reads := 0
			for {
				n, err := b.Read(p)
				out.Write(p[:n])
				if n > 0 {
					reads++
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(out.Bytes(), tc.body) {
				t.Fatal("output differs from the input")
			}
			avg := out.Len() / reads
			t.Logf("%d bytes in %d reads, %d bytes per read on average", out.Len(), reads, avg)
			if avg < bufSize*3/4 {
				t.Fatalf("average read %d bytes into a %d-byte buffer, want at least 3/4 full", avg, bufSize)
			}
		})
	}
}

// TestWindowBorders moves a delimiter, a header block and the context part
// across the borders of the 64 KiB window and of the 32 KiB spool chunks.
func TestWindowBorders(t *testing.T) {
	t.Parallel()
	ct := "multipart/form-data; boundary=" + curlBoundary
	for size := winSize - 300; size <= winSize+40; size += 3 {
		for _, order := range []string{"first", "after"} {
			var body []byte
			if order == "first" {
				body, _ = curlBody(ctxField("contextId", testCtx), fileField(size), ctxField("contextID", testCtx), fileField(size/2))
			} else {
				body, _ = curlBody(fileField(size), ctxField("contextID", testCtx), fileField(size/3), ctxField("contextId", testCtx))
			}
			for _, cut := range []int{len(body), 4096, 7919, winSize - 1} {
				name := fmt.Sprintf("%s/%d/reads %d", order, size, cut)
				r := &chunkReader{data: body, n: cut}
				b, err := Read(r, ct, Config{MaxBytes: mib, MemoryBytes: 40 << 10, TempDir: t.TempDir()})
				if err != nil {
					t.Fatalf("%s: Read: %v", name, err)
				}
				out, err := drain(b, 32<<10)
				b.Close()
				if err != nil {
					t.Fatalf("%s: Body.Read: %v", name, err)
				}
				if !bytes.Equal(out, body) {
					t.Fatalf("%s: output differs from the input", name)
				}
			}
		}
	}
}

// chunkReader returns data in reads of at most n bytes.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestSplitConflict puts a conflicting context part at every offset
// relative to the window border and checks the refusal holds back the end.
func TestSplitConflict(t *testing.T) {
	t.Parallel()
	ct := "multipart/form-data; boundary=" + curlBoundary
	for size := winSize - 200; size <= winSize+20; size += 7 {
		body, _ := curlBody(ctxField("contextId", testCtx), fileField(size), ctxField("contextID", otherCtx))
		b, err := Read(&chunkReader{data: body, n: 1 << 20}, ct, Config{MaxBytes: mib})
		if err != nil {
			t.Fatal(err)
		}
		out, err := drain(b, 32<<10)
		b.Close()
		asError(t, err, ErrConflictContext)
		if len(out) >= len(body) || !bytes.Equal(out, body[:len(out)]) {
			t.Fatalf("size %d: yielded %d bytes of %d, want a strict prefix", size, len(out), len(body))
		}
	}
}

// TestFind checks the boundary search against bytes.Index on data that is
// random, dense with near-boundaries, or made of the boundary's own bytes,
// for boundaries whose rare byte find looks for first is an upper-case
// letter, a digit, a lower-case letter or a dash (so that each of its
// three stages runs: bytes.IndexByte, bndm, findIndex).
func TestFind(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for _, boundary := range []string{"b", "ab", curlBoundary, testBoundary, "------", strings.Repeat("x", 70), "a-a-a-a-a-a-a-a-a-a-a-a-a-a",
		"----WebKitFormBoundary7MA4YWxkTrZu0gW", "Z", "9", "A-A-A-A-A-A-A-A", "----formdata-undici-0123456789", "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"} {
		dash := "--" + boundary
		alphabet := []byte(dash + "\r\nxyz")
		for trial := range 300 {
			n := r.IntN(3000)
			if trial%25 == 0 {
				n = 4<<10 + r.IntN(12<<10) // long enough for every stage on random data
			}
			data := make([]byte, n)
			for i := range data {
				switch trial % 3 {
				case 0:
					data[i] = byte(r.Uint32())
				default:
					data[i] = alphabet[r.IntN(len(alphabet))]
				}
			}
			if trial%5 == 0 && n > len(dash) { // plant one
				copy(data[r.IntN(n-len(dash)):], dash)
			}
			var p parser
			p.init(boundary, data, nil, 0, new([256]uint64))
			p.end = len(data)
			from := 0
			if n > 0 {
				from = r.IntN(n)
			}
			want := bytes.Index(data[from:], []byte(dash))
			if want >= 0 {
				want += from
			}
			if got := p.find(from); got != want {
				t.Fatalf("boundary %q, trial %d: find(%d) = %d, bytes.Index says %d", boundary, trial, from, got, want)
			}
		}
	}
}
