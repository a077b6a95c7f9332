package formctx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// randChunks returns at most the next chunk sizes' bytes per Read, in
// turn, from a seeded generator: reads that end anywhere, across
// boundaries and near-boundaries alike.
type randChunks struct {
	r   io.Reader
	rng *rand.Rand
	max int
}

func (c *randChunks) Read(p []byte) (int, error) {
	n := 1 + c.rng.IntN(c.max)
	if len(p) > n {
		p = p[:n]
	}
	return c.r.Read(p)
}

// TestDirectReadsAgree: whether Body.Read is given small buffers (the
// window path) or large ones (which read the client straight into them),
// it yields the body byte-exact or a strict prefix of it and then the same
// error, for bodies whose
// files are full of near-boundaries, that end early, carry a second
// context, a boundary in the middle of a line, or exceed the size cap; and
// the large buffers did take the direct path.
func TestDirectReadsAgree(t *testing.T) {
	t.Parallel()
	okBody, ct := build(t, ctxField("contextId", testCtx), idField(), fileField(300_000))
	conflict, _ := build(t, ctxField("contextId", testCtx), fileField(200_000), ctxField("contextID", otherCtx))
	curl, curlCT := curlBody(ctxField("contextId", testCtx), fileField(250_000), idField())
	head, _ := build(t, ctxField("contextId", testCtx))
	head = head[:len(head)-len("--"+testBoundary+"--\r\n")]
	midLine := append(append([]byte{}, head...), "--"+testBoundary+"\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a\"\r\n\r\n"...)
	for i := range 3000 {
		midLine = append(midLine, fmt.Sprintf("line %d x--%s then more\r\n", i, testBoundary)...)
	}
	midLine = append(midLine, "\r\n--"+testBoundary+"--\r\n"...)
	badDelim := bytes.Replace(okBody, []byte("\r\n--"+testBoundary+"\r\nContent-Disposition: form-data; name=\"files\""), []byte("\r\n--"+testBoundary+"X\r\nContent-Disposition: form-data; name=\"files\""), 1)
	cases := []struct {
		name, ct string
		body     []byte
		max      int64
	}{
		{"ok", ct, okBody, 0},
		{"curl", curlCT, curl, 0},
		{"truncated in the file", ct, okBody[:200_000], 0},
		{"truncated in the closing boundary", ct, okBody[:len(okBody)-5], 0},
		{"second context differs", ct, conflict, 0},
		{"boundary mid-line", ct, midLine, 0},
		{"bad delimiter", ct, badDelim, 0},
		{"over the cap", ct, okBody, 150_000},
	}
	for _, c := range cases {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s/%d", c.name, seed), func(t *testing.T) {
				t.Parallel()
				read := func(chunk int) ([]byte, int, error) {
					var src io.Reader = &randChunks{r: bytes.NewReader(c.body), rng: rand.New(rand.NewPCG(seed, 1)), max: []int{100, 5000, 40_000, 70_000}[seed]}
					if seed == 0 {
						src = iotest.HalfReader(bytes.NewReader(c.body))
					}
					max := c.max
					if max == 0 {
						max = mib
					}
					b, err := Read(src, c.ct, Config{MaxBytes: max, TempDir: t.TempDir()})
					if err != nil {
						return nil, 0, err
					}
					defer b.Close()
					out, err := drain(b, chunk)
					return out, int(b.directReads), err
				}
				small, _, smallErr := read(700)
				large, direct, largeErr := read(32 << 10)
				if fmt.Sprint(smallErr) != fmt.Sprint(largeErr) {
					t.Fatalf("small reads end with %v, large reads with %v", smallErr, largeErr)
				}
				// Refused: each yielded a strict prefix (how much of it
				// depends on the reads). Accepted: each yielded the body.
				for _, out := range [][]byte{small, large} {
					if smallErr != nil && (len(out) >= len(c.body) || !bytes.Equal(out, c.body[:len(out)])) {
						t.Fatalf("refused, after %d bytes that are not a strict prefix of the %d-byte body", len(out), len(c.body))
					}
					if smallErr == nil && !bytes.Equal(out, c.body) {
						t.Fatal("accepted, but not byte-exact")
					}
				}
				var fe *Error
				if smallErr != nil && !errors.As(smallErr, &fe) {
					t.Fatalf("error %v is not an *Error", smallErr)
				}
				if c.name == "ok" && direct == 0 {
					t.Fatal("large reads never read the client straight into the caller's buffer")
				}
			})
		}
	}
}

// FuzzDirect checks, for any body, boundary and read sizes, that large
// Body reads (which may read the client straight into the buffer) and
// small ones end the same way, with the body byte-exact or a strict prefix
// of it.
func FuzzDirect(f *testing.F) {
	body, _ := build(f, ctxField("contextId", testCtx), fileField(20_000))
	f.Add(body, testBoundary, uint64(1), uint16(3000))
	f.Add(bytes.Repeat([]byte("x"), 10), "b", uint64(2), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, boundary string, seed uint64, maxChunk uint16) {
		ct := "multipart/form-data; boundary=\"" + boundary + "\""
		if len(data) < 200 { // grow it: the direct path needs room
			data = append(data, bytes.Repeat(data, 200/(len(data)+1))...)
		}
		read := func(chunk int) ([]byte, error) {
			src := &randChunks{r: bytes.NewReader(data), rng: rand.New(rand.NewPCG(seed, 2)), max: 1 + int(maxChunk)}
			b, err := Read(src, ct, Config{MaxBytes: mib})
			if err != nil {
				return nil, err
			}
			defer b.Close()
			return drain(b, chunk)
		}
		small, smallErr := read(300)
		large, largeErr := read(directMin + 100)
		if fmt.Sprint(smallErr) != fmt.Sprint(largeErr) {
			t.Fatalf("small reads end with %v, large reads with %v", smallErr, largeErr)
		}
		for _, out := range [][]byte{small, large} {
			if smallErr != nil && len(out) > 0 && (len(out) >= len(data) || !bytes.Equal(out, data[:len(out)])) {
				t.Fatalf("refused after %d bytes that are not a strict prefix of the %d-byte body", len(out), len(data))
			}
			if smallErr == nil && !bytes.Equal(out, data) {
				t.Fatal("accepted, but not byte-exact")
			}
		}
	})
}
