package adminapi

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// idemStore keeps the responses of writes sent with an Idempotency-Key.
// begin claims key for a request with fingerprint fp: it returns the
// stored entry of a finished earlier request (replay), or conflict=true
// while one with the same key still runs, or mismatch=true when the key
// was used for another request. Otherwise the caller runs the request
// and calls finish or abandon.
type idemStore interface {
	begin(ctx context.Context, key string, fp [32]byte) (prev *idemEntry, conflict, mismatch bool, err error)
	finish(ctx context.Context, key string, fp [32]byte, status int, body []byte, location string) error
	abandon(ctx context.Context, key string) error
}

var (
	_ idemStore = (*idempotency)(nil)
	_ idemStore = (*redisIdempotency)(nil)
)

// idempotency is the in-memory idemStore: for ttl and at most max keys
// (the oldest go first), per replica. It is safe for concurrent use.
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

// idemRecord is an idemEntry as Redis keeps it.
type idemRecord struct {
	Fingerprint string `json:"fp"`
	Done        bool   `json:"done"`
	Status      int    `json:"status,omitempty"`
	Body        []byte `json:"body,omitempty"`
	Location    string `json:"location,omitempty"`
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

func (s *idempotency) begin(_ context.Context, key string, fp [32]byte) (prev *idemEntry, conflict, mismatch bool, err error) {
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
			return nil, false, true, nil
		case !ent.done:
			return nil, true, false, nil
		}
		c := *ent
		return &c, false, false, nil
	}
	for s.order.Len() >= s.max {
		old := s.order.Front()
		s.order.Remove(old)
		delete(s.entries, old.Value.(*idemEntry).key)
	}
	s.entries[key] = s.order.PushBack(&idemEntry{key: key, fingerprint: fp, expires: now.Add(s.ttl)})
	return nil, false, false, nil
}

func (s *idempotency) finish(_ context.Context, key string, _ [32]byte, status int, body []byte, location string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		ent := e.Value.(*idemEntry)
		ent.done, ent.status, ent.body, ent.location = true, status, body, location
		ent.expires = s.now().Add(s.ttl)
	}
	return nil
}

func (s *idempotency) abandon(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		s.order.Remove(e)
		delete(s.entries, key)
	}
	return nil
}

// redisIdempotency is the idemStore shared by every replica of a Redis
// keystore: one Redis key per caller and Idempotency-Key (its SHA-256:
// the header's value is not stored), claimed with SET NX. A claim
// expires after pendingTTL, so a replica that dies mid-request does not
// block the retries for a day; a finished request is kept for ttl. The
// Redis keys expire by themselves, so there is no cap.
type redisIdempotency struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// pendingTTL bounds how long a claim of a request that never finishes
// blocks its retries (409).
const pendingTTL = time.Minute

func (s *redisIdempotency) rkey(key string) string {
	h := sha256.Sum256([]byte(key))
	return s.prefix + "adminapi:idem:" + hex.EncodeToString(h[:])
}

func (s *redisIdempotency) begin(ctx context.Context, key string, fp [32]byte) (*idemEntry, bool, bool, error) {
	fps := hex.EncodeToString(fp[:])
	claim, _ := json.Marshal(idemRecord{Fingerprint: fps})
	rk := s.rkey(key)
	for attempt := 0; attempt < 3; attempt++ {
		ok, err := s.client.SetNX(ctx, rk, claim, pendingTTL).Result()
		if err != nil {
			return nil, false, false, fmt.Errorf("adminapi: idempotency: %w", err)
		}
		if ok {
			return nil, false, false, nil
		}
		b, err := s.client.Get(ctx, rk).Bytes()
		if errors.Is(err, redis.Nil) {
			continue // expired in between: claim again
		}
		if err != nil {
			return nil, false, false, fmt.Errorf("adminapi: idempotency: %w", err)
		}
		var rec idemRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, false, false, fmt.Errorf("adminapi: idempotency record %s: %w", rk, err)
		}
		switch {
		case rec.Fingerprint != fps:
			return nil, false, true, nil
		case !rec.Done:
			return nil, true, false, nil
		}
		return &idemEntry{key: key, fingerprint: fp, done: true, status: rec.Status, body: rec.Body, location: rec.Location}, false, false, nil
	}
	return nil, true, false, nil
}

// finish replaces the claim begin made with the finished record, in one
// SET … XX (only while the claim is there, as the in-memory store does).
func (s *redisIdempotency) finish(ctx context.Context, key string, fp [32]byte, status int, body []byte, location string) error {
	out, _ := json.Marshal(idemRecord{Fingerprint: hex.EncodeToString(fp[:]), Done: true, Status: status, Body: body, Location: location})
	set, err := s.client.SetXX(ctx, s.rkey(key), out, s.ttl).Result()
	if err != nil {
		return fmt.Errorf("adminapi: idempotency: %w", err)
	}
	if !set {
		return errors.New("adminapi: idempotency: the claim was gone (expired or abandoned)")
	}
	return nil
}

func (s *redisIdempotency) abandon(ctx context.Context, key string) error {
	return s.client.Del(ctx, s.rkey(key)).Err()
}
