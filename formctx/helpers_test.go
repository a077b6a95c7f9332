package formctx

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"strings"
	"testing"
	"testing/iotest"
)

const (
	testBoundary = "kgTestBoundary0123456789"
	testCtx      = "6f1c2a54-3b8e-4d2f-9a7c-0e5b1d4c8f21"
	otherCtx     = "0b9d7e3a-1c2f-4e5d-8a6b-7c8d9e0f1a2b"
	testID       = "3e2d1c0b-a987-4654-8321-0fedcba98765"
)

// field is one form part: a file of size bytes when size > 0, a value
// otherwise.
type field struct {
	name  string
	value string
	size  int
}

func ctxField(name, v string) field { return field{name: name, value: v} }
func fileField(size int) field      { return field{name: "files", size: size} }
func idField() field                { return field{name: "id", value: testID} }

// fileBytes returns size bytes of file content sprinkled with near-boundary
// sequences, so the parser's boundary scanning is exercised.
func fileBytes(size int, boundary string) []byte {
	var buf bytes.Buffer
	buf.Grow(size)
	near := "\r\n--" + boundary[:len(boundary)-1] + "\r\n"
	for i := 0; buf.Len() < size; i++ {
		if i%97 == 0 {
			buf.WriteString(near)
		}
		buf.WriteByte(byte(i*31 + i>>8))
	}
	return buf.Bytes()[:size]
}

// build writes a form with mime/multipart.Writer.
func build(t testing.TB, fields ...field) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	if err := w.SetBoundary(testBoundary); err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if f.size > 0 {
			pw, err := w.CreateFormFile(f.name, "doc.pdf")
			if err != nil {
				t.Fatal(err)
			}
			pw.Write(fileBytes(f.size, testBoundary))
			continue
		}
		if err := w.WriteField(f.name, f.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.FormDataContentType()
}

// curlBoundary is the shape of the boundaries curl generates.
const curlBoundary = "------------------------d74496d66958873e"

// curlBody writes a form by hand the way `curl -F files=@doc.pdf -F id=...
// -F contextId=...` sends it, with parts in the given order.
func curlBody(fields ...field) ([]byte, string) {
	var b strings.Builder
	for _, f := range fields {
		b.WriteString("--" + curlBoundary + "\r\n")
		if f.size > 0 {
			fmt.Fprintf(&b, "Content-Disposition: form-data; name=%q; filename=\"doc.pdf\"\r\n", f.name)
			b.WriteString("Content-Type: application/pdf\r\n\r\n")
			b.Write(fileBytes(f.size, curlBoundary))
		} else {
			fmt.Fprintf(&b, "Content-Disposition: form-data; name=%q\r\n\r\n", f.name)
			b.WriteString(f.value)
		}
		b.WriteString("\r\n")
	}
	b.WriteString("--" + curlBoundary + "--\r\n")
	return []byte(b.String()), "multipart/form-data; boundary=" + curlBoundary
}

// drain reads b to its end, returning what it yielded and the error that
// ended it (nil for io.EOF).
func drain(b *Body, chunk int) ([]byte, error) {
	var out bytes.Buffer
	p := make([]byte, chunk)
	for {
		n, err := b.Read(p)
		out.Write(p[:n])
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// asError checks err is the *Error want.
func asError(t *testing.T, err error, want *Error) {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("error = %v (%T), want *Error %q", err, err, want.Message)
	}
	if !errors.Is(err, want) || fe.Status != want.Status || fe.Message != want.Message {
		t.Fatalf("error = %d %q, want %d %q", fe.Status, fe.Message, want.Status, want.Message)
	}
}

// splitReaders hand a body to Read whole, a byte at a time, in halves, and
// with the last data arriving together with io.EOF.
var splitReaders = []struct {
	name string
	wrap func(io.Reader) io.Reader
}{
	{"whole", func(r io.Reader) io.Reader { return r }},
	{"one byte", iotest.OneByteReader},
	{"half", iotest.HalfReader},
	{"data with EOF", iotest.DataErrReader},
}
