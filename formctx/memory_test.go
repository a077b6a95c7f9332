package formctx

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestPeakHeap64MiB streams a 64 MiB upload whose context part comes after
// the file, so the whole file spills, and checks the heap stays small.
func TestPeakHeap64MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB body")
	}
	const fileSize = 64 << 20
	pr, pw := io.Pipe()
	sent := sha256.New()
	go func() {
		w := io.MultiWriter(pw, sent)
		fmt.Fprintf(w, "--%s\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.pdf\"\r\nContent-Type: application/pdf\r\n\r\n", curlBoundary)
		chunk := fileBytes(64<<10, curlBoundary)
		for n := 0; n < fileSize; n += len(chunk) {
			w.Write(chunk)
		}
		fmt.Fprintf(w, "\r\n--%s\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n%s\r\n--%s--\r\n", curlBoundary, testCtx, curlBoundary)
		pw.Close()
	}()

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var (
		peak uint64
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	b, err := Read(pr, "multipart/form-data; boundary="+curlBoundary, Config{MaxBytes: fileSize + mib, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, b)
	b.Close()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !b.Spilled() || b.PrefixBytes() < fileSize {
		t.Errorf("Spilled() = %v, PrefixBytes() = %d; want the file spilled", b.Spilled(), b.PrefixBytes())
	}
	if !sameSum(got, sent) {
		t.Fatalf("the %d bytes read differ from those sent", n)
	}
	t.Logf("body %d MiB: heap in use %.1f MiB before, peak %.1f MiB", n>>20, float64(base.HeapInuse)/mib, float64(peak)/mib)
	if peak > 16*mib {
		t.Fatalf("peak heap in use %.1f MiB, want < 16 MiB for a %d MiB body", float64(peak)/mib, n>>20)
	}
}

func sameSum(a, b hash.Hash) bool { return bytes.Equal(a.Sum(nil), b.Sum(nil)) }
