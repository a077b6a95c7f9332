package secretscan

import (
	"sync"
	"time"
)

// replays remembers the answer to each body for a window, so that GitHub's
// retry of an alert (or anyone's replay of a captured one) gets the same
// answer and causes no second action. Entries are keyed by the body's
// SHA-256 and capped in number; a body seen while its first copy is still
// being handled waits for that answer.
type replays struct {
	window time.Duration
	max    int
	now    func() time.Time

	mu sync.Mutex
	m  map[[32]byte]*answer
}

// answer is one remembered response; done is closed once it is set.
type answer struct {
	done   chan struct{}
	at     time.Time
	status int
	body   []byte
	keep   bool // false: not to be replayed (a failure GitHub should retry)
}

// begin returns the entry for sum and whether the caller is its first
// (and must finish it).
func (r *replays) begin(sum [32]byte) (*answer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if a, ok := r.m[sum]; ok {
		select {
		case <-a.done:
			if a.keep && now.Sub(a.at) < r.window {
				return a, false
			}
			delete(r.m, sum)
		default:
			return a, false
		}
	}
	if len(r.m) >= r.max {
		r.prune(now)
	}
	a := &answer{done: make(chan struct{}), at: now}
	if len(r.m) < r.max {
		r.m[sum] = a
	}
	return a, true
}

// finish records the answer and wakes its waiters.
func (r *replays) finish(sum [32]byte, a *answer, status int, body []byte, keep bool) {
	r.mu.Lock()
	a.status, a.body, a.keep = status, body, keep
	if !keep && r.m[sum] == a {
		delete(r.m, sum)
	}
	r.mu.Unlock()
	close(a.done)
}

// prune drops finished entries older than the window; r.mu is held.
func (r *replays) prune(now time.Time) {
	for k, a := range r.m {
		select {
		case <-a.done:
			if now.Sub(a.at) >= r.window {
				delete(r.m, k)
			}
		default:
		}
	}
}
