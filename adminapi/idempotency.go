package adminapi

import (
	"container/list"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"
)

// idempotency remembers the responses of writes sent with an
// Idempotency-Key, per caller, in memory: for ttl and at most max of
// them (the oldest go first). It is safe for concurrent use.
//
// Memory, not Redis: a retry is deduplicated by the replica that served
// the first attempt. Behind a load balancer that spreads one client's
// requests over replicas, pin admin clients to one replica (the admin
// API is usually reached on one address) — see the README.
type idempotency struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu      sync.Mutex
	entries map[string]*list.Element // of *idemEntry
	order   *list.List               // oldest first
}

type idemEntry struct {
	key         string
	fingerprint [32]byte
	expires     time.Time
	done        bool
	status      int
	body        []byte
	location    string
}

func newIdempotency(ttl time.Duration, max int, now func() time.Time) *idempotency {
	return &idempotency{ttl: ttl, max: max, now: now, entries: map[string]*list.Element{}, order: list.New()}
}

// fingerprint is what a retry must repeat: method, path and body bytes.
func fingerprint(r *http.Request, body []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "\x00"))
	h.Write(body)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// begin claims key for a request with fp. It returns the stored entry of
// a finished earlier request (replay), or conflict=true when one with
// the same key is still running, or mismatch=true when the key was used
// for another request. Otherwise the caller runs the request and calls
// finish or abandon.
func (s *idempotency) begin(key string, fp [32]byte) (prev *idemEntry, conflict, mismatch bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for e := s.order.Front(); e != nil; e = s.order.Front() {
		if ent := e.Value.(*idemEntry); ent.done && !now.Before(ent.expires) {
			s.order.Remove(e)
			delete(s.entries, ent.key)
			continue
		}
		break
	}
	if e, ok := s.entries[key]; ok {
		ent := e.Value.(*idemEntry)
		switch {
		case ent.fingerprint != fp:
			return nil, false, true
		case !ent.done:
			return nil, true, false
		}
		c := *ent
		return &c, false, false
	}
	for s.order.Len() >= s.max {
		old := s.order.Front()
		s.order.Remove(old)
		delete(s.entries, old.Value.(*idemEntry).key)
	}
	s.entries[key] = s.order.PushBack(&idemEntry{key: key, fingerprint: fp, expires: now.Add(s.ttl)})
	return nil, false, false
}

// finish stores the response to replay for key.
func (s *idempotency) finish(key string, status int, body []byte, location string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		ent := e.Value.(*idemEntry)
		ent.done, ent.status, ent.body, ent.location = true, status, body, location
		ent.expires = s.now().Add(s.ttl)
	}
}

// abandon forgets key, so that a retry runs again (after a server error).
func (s *idempotency) abandon(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		s.order.Remove(e)
		delete(s.entries, key)
	}
}
