package testkit

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

func TestCALeafIsTrustedForLocalhost(t *testing.T) {
	t.Parallel()
	ca := NewCA(t, "testkit CA")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.TLSLeaf(t, 7)}}
	srv.StartTLS()
	defer srv.Close()
	for _, name := range []string{"localhost", "127.0.0.1"} {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: name}}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 7 {
			t.Errorf("serial %d", got)
		}
	}
}

func TestSyncBufferConcurrentWriters(t *testing.T) {
	t.Parallel()
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				_, _ = b.Write([]byte("x"))
			}
		}()
	}
	wg.Wait()
	if len(b.String()) != 800 {
		t.Fatalf("lost writes: %d", len(b.String()))
	}
}

// Eventually's conditions say what they saw.
func TestEqualAndTrue(t *testing.T) {
	if err := Equal(200, 200); err != nil {
		t.Fatal(err)
	}
	if err := Equal(401, 200); err == nil || err.Error() != "got 401, want 200" {
		t.Fatalf("Equal: %v", err)
	}
	if err := True(false, "%d calls", 3); err == nil || err.Error() != "3 calls" {
		t.Fatalf("True: %v", err)
	}
	if err := True(true, "unused"); err != nil {
		t.Fatal(err)
	}
}
