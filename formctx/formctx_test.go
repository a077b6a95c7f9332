package formctx

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

const mib = 1 << 20

func TestRead(t *testing.T) {
	t.Parallel()
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	okBody, okCT := build(t, ctxField("contextId", testCtx), idField(), fileField(3000))
	curlFirst, curlCT := curlBody(ctxField("contextId", testCtx), idField(), fileField(5000))
	curlLast, _ := curlBody(fileField(200_000), idField(), ctxField("contextId", testCtx))
	ctxAfterFile, _ := build(t, fileField(mib), idField(), ctxField("contextId", testCtx))
	conflictAfterFile, conflictCT := build(t, ctxField("contextId", testCtx), fileField(mib), ctxField("contextID", otherCtx))
	crlfBoundary := "--" + testBoundary

	tests := []struct {
		name        string
		body        []byte
		ct          string
		cfg         Config // MaxBytes 0 → 64 MiB
		wantReadErr *Error // from Read
		wantBodyErr *Error // from Body.Read
		wantCtx     string // default testCtx
		wantSpilled bool
	}{
		{name: "context first", body: okBody, ct: okCT},
		{name: "context after 1 MiB file spills", body: ctxAfterFile, ct: okCT, wantSpilled: true},
		{name: "contextID spelling", body: first(build(t, idField(), ctxField("contextID", testCtx), fileField(100))), ct: okCT},
		{name: "other letter case counts as context", body: first(build(t, ctxField("CONTEXTID", testCtx))), ct: okCT},
		{name: "both spellings equal", body: first(build(t, ctxField("contextId", testCtx), fileField(mib), ctxField("contextID", testCtx))), ct: okCT, wantSpilled: false},
		{name: "both spellings different", body: first(build(t, ctxField("contextID", testCtx), ctxField("contextId", otherCtx))), ct: okCT, wantBodyErr: ErrConflictContext},
		{name: "both spellings different, second after 1 MiB file", body: conflictAfterFile, ct: conflictCT, wantBodyErr: ErrConflictContext},
		{name: "same spelling twice different", body: first(build(t, ctxField("contextId", testCtx), idField(), ctxField("contextId", otherCtx))), ct: okCT, wantBodyErr: ErrConflictContext},
		{name: "later context too long", body: first(build(t, ctxField("contextId", testCtx), ctxField("contextId", strings.Repeat("x", 2000)))), ct: okCT, wantBodyErr: ErrMalformed},
		{name: "context too long", body: first(build(t, ctxField("contextId", strings.Repeat("x", 1025)))), ct: okCT, wantReadErr: ErrMalformed},
		{name: "context at MaxFieldBytes", body: first(build(t, ctxField("contextId", strings.Repeat("x", 1024)))), ct: okCT, wantCtx: strings.Repeat("x", 1024)},
		{name: "empty context", body: first(build(t, ctxField("contextId", ""), fileField(10))), ct: okCT, wantReadErr: ErrMissingContext},
		{name: "missing context", body: first(build(t, idField(), fileField(mib))), ct: okCT, wantReadErr: ErrMissingContext},
		{name: "no parts at all", body: []byte(crlfBoundary + "--\r\n"), ct: okCT, wantReadErr: ErrMissingContext},
		{name: "not multipart", body: okBody, ct: "application/json", wantReadErr: ErrNotMultipart},
		{name: "multipart but not form-data", body: okBody, ct: "multipart/mixed; boundary=" + testBoundary, wantReadErr: ErrNotMultipart},
		{name: "missing boundary", body: okBody, ct: "multipart/form-data", wantReadErr: ErrNotMultipart},
		{name: "unparsable content type", body: okBody, ct: "multipart/form-data; boundary=", wantReadErr: ErrNotMultipart},
		{name: "empty content type", body: okBody, ct: "", wantReadErr: ErrNotMultipart},
		{name: "boundary over 70 chars", body: okBody, ct: "multipart/form-data; boundary=" + strings.Repeat("b", 71), wantReadErr: ErrNotMultipart},
		{name: "wrong boundary", body: okBody, ct: "multipart/form-data; boundary=other", wantReadErr: ErrMalformed},
		{name: "truncated mid-file after context", body: curlFirst[:len(curlFirst)-2000], ct: curlCT, wantBodyErr: ErrMalformed},
		{name: "truncated before closing boundary", body: okBody[:len(okBody)-len(crlfBoundary+"--\r\n")], ct: okCT, wantBodyErr: ErrMalformed},
		{name: "truncated in closing boundary", body: okBody[:len(okBody)-4], ct: okCT, wantBodyErr: ErrMalformed},
		{name: "truncated before context", body: curlLast[:100_000], ct: curlCT, wantReadErr: ErrMalformed},
		{name: "truncated inside context value", body: curlLast[:len(curlLast)-len(curlBoundary)-10], ct: curlCT, wantReadErr: ErrMalformed},
		{name: "empty body", body: nil, ct: okCT, wantReadErr: ErrMalformed},
		{name: "garbage", body: []byte("\x00\xff garbage \r\n\r\n--nope\r\n"), ct: okCT, wantReadErr: ErrMalformed},
		{name: "garbage after context part", body: []byte(crlfBoundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx + "\r\n" + crlfBoundary + "\r\nJUNK LINE\r\n\r\ndata\r\n" + crlfBoundary + "--\r\n"), ct: okCT, wantBodyErr: ErrPartHeader},
		{name: "hand-written minimal body", body: []byte(crlfBoundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx + "\r\n" + crlfBoundary + "--\r\n"), ct: okCT},
		{name: "over MaxBytes while reading to the context", body: ctxAfterFile, ct: okCT, cfg: Config{MaxBytes: mib / 2}, wantReadErr: ErrTooLarge},
		{name: "over MaxBytes while streaming", body: conflictAfterFile, ct: conflictCT, cfg: Config{MaxBytes: mib / 2}, wantBodyErr: ErrTooLarge},
		{name: "over MaxBytes by one byte", body: curlFirst, ct: curlCT, cfg: Config{MaxBytes: int64(len(curlFirst) - 1)}, wantBodyErr: ErrTooLarge},
		{name: "exactly MaxBytes", body: curlFirst, ct: curlCT, cfg: Config{MaxBytes: int64(len(curlFirst))}},
		{name: "over MaxBytes in the epilogue", body: join(curlFirst, bytes.Repeat([]byte("e"), 100)), ct: curlCT, cfg: Config{MaxBytes: int64(len(curlFirst) + 50)}, wantBodyErr: ErrTooLarge},
		{name: "small body over MaxBytes", body: okBody, ct: okCT, cfg: Config{MaxBytes: 100}, wantReadErr: ErrTooLarge},
		{name: "epilogue forwarded", body: join(okBody, []byte("epilogue bytes\r\nmore\r\n")), ct: okCT},
		{name: "large epilogue forwarded", body: join(okBody, fileBytes(100_000, testBoundary)), ct: okCT},
		{name: "part headers over 16 KiB", body: []byte(crlfBoundary + "\r\nX-Pad: " + strings.Repeat("p", 30_000) + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx + "\r\n" + crlfBoundary + "--\r\n"), ct: okCT, wantReadErr: ErrPartHeader},
		{name: "later part headers over 16 KiB", body: []byte(crlfBoundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + testCtx + "\r\n" + crlfBoundary + "\r\nX-Pad: " + strings.Repeat("p", 30_000) + "\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\n" + testID + "\r\n" + crlfBoundary + "--\r\n"), ct: okCT, wantBodyErr: ErrPartHeader},
		{name: "preamble over 16 KiB", body: join(bytes.Repeat([]byte("preamble line\r\n"), 2000), okBody), ct: okCT, wantReadErr: ErrMalformed},
		{name: "preamble", body: join([]byte("This is a preamble.\r\n"), okBody), ct: okCT},
		{name: "curl body, context first", body: curlFirst, ct: curlCT},
		{name: "curl body, context last", body: curlLast, ct: curlCT},
		{name: "LF-only line endings", body: []byte(strings.ReplaceAll(string(curlLast), "\r\n", "\n")), ct: curlCT, wantReadErr: ErrDelimiter},
		{name: "whitespace after boundaries", body: []byte(strings.ReplaceAll(string(okBody), crlfBoundary+"\r\n", crlfBoundary+" \t\r\n")), ct: okCT, wantReadErr: ErrDelimiter},
		{name: "closing boundary without CRLF", body: okBody[:len(okBody)-2], ct: okCT},
		{name: "CRLF inside context value", body: first(build(t, ctxField("contextId", "a\r\nb"))), ct: okCT, wantReadErr: ErrContextValue},
		{name: "quoted boundary", body: okBody, ct: `multipart/form-data; boundary="` + testBoundary + `"`},
		{name: "small memory spills", body: first(build(t, fileField(100_000), ctxField("contextId", testCtx))), ct: okCT, cfg: Config{MemoryBytes: 100}, wantSpilled: true},
		{name: "small memory, prefix within the window: nothing spooled", body: okBody, ct: okCT, cfg: Config{MemoryBytes: 100}, wantSpilled: false},
	}
	for _, tc := range tests {
		for _, rd := range splitReaders {
			t.Run(tc.name+"/"+rd.name, func(t *testing.T) {
				t.Parallel()
				if rd.name == "one byte" && len(tc.body) > 300_000 {
					t.Skip("too slow one byte at a time")
				}
				dir := t.TempDir()
				cfg := tc.cfg
				cfg.TempDir = dir
				if cfg.MaxBytes == 0 {
					cfg.MaxBytes = 64 * mib
				}
				b, err := Read(rd.wrap(bytes.NewReader(tc.body)), tc.ct, cfg)
				if tc.wantBodyErr != nil && err != nil {
					// Read parses no further than the context part, but the
					// byte cap applies to its read-ahead too.
					asError(t, err, tc.wantBodyErr)
					return
				}
				if tc.wantReadErr != nil {
					asError(t, err, tc.wantReadErr)
					if b != nil {
						t.Fatal("Read returned a Body with an error")
					}
					assertEmptyDir(t, dir)
					return
				}
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				defer b.Close()
				want := tc.wantCtx
				if want == "" {
					want = testCtx
				}
				if b.Context() != want {
					t.Errorf("Context() = %q, want %q", b.Context(), want)
				}
				if b.Spilled() != tc.wantSpilled {
					t.Errorf("Spilled() = %v, want %v", b.Spilled(), tc.wantSpilled)
				}
				if b.PrefixBytes() <= 0 || b.PrefixBytes() > int64(len(tc.body)) {
					t.Errorf("PrefixBytes() = %d, body is %d bytes", b.PrefixBytes(), len(tc.body))
				}
				if m := b.spool.memLen; m > DefaultMemoryBytes {
					t.Errorf("held %d bytes in memory, cap %d", m, DefaultMemoryBytes)
				}
				assertEmptyDir(t, dir) // spill files are unlinked at once
				out, err := drain(b, 7919)
				if tc.wantBodyErr != nil {
					asError(t, err, tc.wantBodyErr)
					if len(out) >= len(tc.body) || !bytes.Equal(out, tc.body[:len(out)]) {
						t.Fatalf("on error Body yielded %d bytes, want a strict prefix of the %d-byte body", len(out), len(tc.body))
					}
					return
				}
				if err != nil {
					t.Fatalf("Body.Read: %v", err)
				}
				if sum(out) != sum(tc.body) {
					t.Fatalf("Body yielded %d bytes that differ from the %d-byte body", len(out), len(tc.body))
				}
				if n, err := b.Read(make([]byte, 10)); n != 0 || !errors.Is(err, io.EOF) {
					t.Fatalf("Read after EOF = %d, %v; want 0, EOF", n, err)
				}
			})
		}
	}
}

func first(b []byte, _ string) []byte { return b }

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("temp dir holds %d files, want none", len(ents))
	}
}

func TestReadRequiresMaxBytes(t *testing.T) {
	t.Parallel()
	body, ct := build(t, ctxField("contextId", testCtx))
	if _, err := Read(bytes.NewReader(body), ct, Config{}); err == nil || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("Read with zero MaxBytes: err = %v, want one naming max_bytes", err)
	}
}

func TestReadClientError(t *testing.T) {
	t.Parallel()
	body, ct := build(t, fileField(100_000), ctxField("contextId", testCtx))
	boom := errors.New("connection reset")
	_, err := Read(io.MultiReader(bytes.NewReader(body[:50_000]), iotest.ErrReader(boom)), ct, Config{MaxBytes: mib})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the client's read error", err)
	}
	var fe *Error
	if errors.As(err, &fe) {
		t.Fatalf("a client read error came back as *Error %q", fe.Message)
	}

	body, ct = build(t, ctxField("contextId", testCtx), fileField(100_000))
	b, err := Read(io.MultiReader(bytes.NewReader(body[:50_000]), iotest.ErrReader(boom)), ct, Config{MaxBytes: mib})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := io.ReadAll(b); !errors.Is(err, boom) {
		t.Fatalf("Body.Read err = %v, want the client's read error", err)
	}
}

func TestReadHTTPMaxBytesReader(t *testing.T) {
	t.Parallel()
	body, ct := build(t, fileField(100_000), ctxField("contextId", testCtx))
	rec := httptest.NewRecorder()
	r := http.MaxBytesReader(rec, io.NopCloser(bytes.NewReader(body)), 10_000)
	_, err := Read(r, ct, Config{MaxBytes: mib})
	asError(t, err, ErrTooLarge)
}

func TestBodyCloseReleases(t *testing.T) {
	t.Parallel()
	body, ct := build(t, fileField(mib), ctxField("contextId", testCtx), fileField(mib))
	dir := t.TempDir()
	b, err := Read(bytes.NewReader(body), ct, Config{MaxBytes: 4 * mib, TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Spilled() {
		t.Fatal("expected a spill")
	}
	if _, err := io.ReadFull(b, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if b.spool.f != nil || b.bufs != nil || len(b.spool.chunks) != 0 {
		t.Fatal("Close left the spool or buffers held")
	}
	if _, err := b.Read(make([]byte, 10)); err == nil {
		t.Fatal("Read after Close succeeded")
	}
}

// TestNoGoroutineLeak closes half-read Bodies, including one whose Read is
// blocked on a stalled client, and checks the goroutine count returns to
// its baseline.
func TestNoGoroutineLeak(t *testing.T) {
	body, ct := build(t, ctxField("contextId", testCtx), fileField(2*mib))
	base := runtime.NumGoroutine()

	for range 10 {
		b, err := Read(bytes.NewReader(body), ct, Config{MaxBytes: 4 * mib})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, make([]byte, mib)); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}

	// A client that stalls after the context part.
	pr, pw := io.Pipe()
	go func() { pw.Write(body[:100_000]) }()
	b, err := Read(pr, ct, Config{MaxBytes: 4 * mib})
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, b)
		readErr <- err
	}()
	b.Close() // returns although a Read may be blocked on the client
	stall := errors.New("client gone")
	pw.CloseWithError(stall) // what the HTTP server does when the client goes away
	if err := <-readErr; err == nil {
		t.Fatal("Read of a closed Body on a failed client ended without error")
	}
	b.mu.Lock()
	released := b.released
	b.mu.Unlock()
	if !released {
		t.Fatal("buffers still held after Close and the blocked Read returned")
	}

	var n int
	for range 200 {
		if n = runtime.NumGoroutine(); n <= base {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("goroutines: %d, baseline %d", n, base)
}

// TestUpstreamNeverGetsCompleteBadRequest forwards Bodies over real HTTP
// with the original Content-Length and checks what the upstream receives.
func TestUpstreamNeverGetsCompleteBadRequest(t *testing.T) {
	t.Parallel()
	type result struct {
		n   int
		err error
	}
	got := make(chan result, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(r.Body)
		got <- result{len(data), err}
	}))
	defer up.Close()

	good, ct := build(t, ctxField("contextId", testCtx), fileField(mib), ctxField("contextID", testCtx))
	bad, _ := build(t, ctxField("contextId", testCtx), fileField(mib), ctxField("contextID", otherCtx))
	small, _ := build(t, ctxField("contextId", testCtx), ctxField("contextID", otherCtx))
	for _, tc := range []struct {
		name string
		body []byte
		err  error // what Err reports once the transport is done
	}{
		{"agreeing contexts", good, nil},
		{"conflict after a file", bad, ErrConflictContext},
		{"conflict in the prefix", small, ErrConflictContext},
	} {
		b, err := Read(bytes.NewReader(tc.body), ct, Config{MaxBytes: 4 * mib})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, up.URL, b)
		req.ContentLength = int64(len(tc.body))
		req.Header.Set("Content-Type", ct)
		resp, err := up.Client().Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		ok := tc.err == nil
		if ok != (err == nil) {
			t.Errorf("%s: round trip err = %v", tc.name, err)
		}
		// What the proxy asks once its transport gave up: why the body
		// failed, asked from this goroutine while the transport's own read
		// it (-race).
		if got := b.Err(); got != tc.err {
			t.Errorf("%s: Err() = %v, want %v", tc.name, got, tc.err)
		}
		r := <-got
		if ok && (r.err != nil || r.n != len(tc.body)) {
			t.Errorf("%s: upstream got %d of %d bytes, err %v", tc.name, r.n, len(tc.body), r.err)
		}
		if !ok && r.err == nil {
			t.Errorf("%s: upstream read a complete %d-byte body", tc.name, r.n)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	file := t.TempDir() + "/f"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"defaults", DefaultConfig(), ""},
		{"only max bytes", Config{MaxBytes: 1}, ""},
		{"zero max bytes", Config{}, "body.max_bytes: must be > 0, got 0"},
		{"negative memory", Config{MaxBytes: 1, MemoryBytes: -1}, "body.memory_bytes:"},
		{"huge field", Config{MaxBytes: 1, MaxFieldBytes: 1 << 20}, "body.max_field_bytes:"},
		{"missing temp dir", Config{MaxBytes: 1, TempDir: file + "/nope"}, "body.temp_dir:"},
		{"temp dir is a file", Config{MaxBytes: 1, TempDir: file}, "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPrefixInTheWindowIsNotSpooled: a body whose context part comes
// within the first window's worth is handed out from the window, never
// copied to the spool; one whose prefix outgrows the window spools what
// the window had to drop, and either way Read yields the body byte-exact.
func TestPrefixInTheWindowIsNotSpooled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fields  []field
		spooled bool
	}{
		{"context first, 100 KB file", []field{ctxField("contextId", testCtx), fileField(100_000)}, false},
		{"context after a 200 KB file", []field{fileField(200_000), ctxField("contextId", testCtx)}, true},
	} {
		body, ct := build(t, tc.fields...)
		t.Run(tc.name, func(t *testing.T) {
			fb, err := Read(bytes.NewReader(body), ct, Config{MaxBytes: mib, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer fb.Close()
			if got := fb.spool.len() > 0; got != tc.spooled {
				t.Errorf("spooled %d bytes; want spooling %v", fb.spool.len(), tc.spooled)
			}
			if fb.PrefixBytes() < fb.spool.len() || fb.PrefixBytes() > int64(len(body)) {
				t.Errorf("PrefixBytes %d, spool %d, body %d", fb.PrefixBytes(), fb.spool.len(), len(body))
			}
			got, err := io.ReadAll(fb)
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("read %d bytes (%v), want the %d-byte body exactly", len(got), err, len(body))
			}
		})
	}
}
