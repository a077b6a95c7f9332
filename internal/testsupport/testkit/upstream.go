package testkit

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// HoldingUpstream is an upstream that serves every request with Next, but
// first holds those of one key id (the gateway's X-Keygate-Key-Id) until
// Release: it keeps requests in flight for concurrency tests.
type HoldingUpstream struct {
	Next    http.Handler
	release chan struct{}
	once    sync.Once
	keyID   atomic.Value
	hits    atomic.Int64
	held    atomic.Int64
}

// NewHoldingUpstream returns an upstream that holds nothing until Hold.
func NewHoldingUpstream(next http.Handler) *HoldingUpstream {
	u := &HoldingUpstream{Next: next, release: make(chan struct{})}
	u.keyID.Store("")
	return u
}

// Hold makes requests of keyID wait for Release.
func (u *HoldingUpstream) Hold(keyID string) { u.keyID.Store(keyID) }

// Release lets every held request, and any later one, through; it may be
// called more than once (a deferred call after an explicit one).
func (u *HoldingUpstream) Release() { u.once.Do(func() { close(u.release) }) }

// Hits counts the requests that reached the upstream.
func (u *HoldingUpstream) Hits() int64 { return u.hits.Load() }

// Held counts the requests that were held (and may since have been released).
func (u *HoldingUpstream) Held() int64 { return u.held.Load() }

func (u *HoldingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.hits.Add(1)
	if id := u.keyID.Load().(string); id != "" && r.Header.Get("X-Keygate-Key-Id") == id {
		u.held.Add(1)
		<-u.release
	}
	u.Next.ServeHTTP(w, r)
}

// InFlight starts n calls of do at once, each returning an HTTP status,
// and returns a function that waits for them all and reports any status
// other than 200 as a test error.
func InFlight(t testing.TB, n int, do func() int) (wait func()) {
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for range n {
		wg.Go(func() { statuses <- do() })
	}
	return func() {
		t.Helper()
		wg.Wait()
		close(statuses)
		for s := range statuses {
			if s != 200 {
				t.Errorf("an admitted request got %d", s)
			}
		}
	}
}
