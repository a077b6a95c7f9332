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
