// Package audittest is a keyops.Auditor for tests that keeps the events,
// so that a test can say what was audited.
package audittest

import (
	"context"
	"sync"

	"github.com/keygate/keygate/keyops"
)

// Recorder keeps every event it is given. The zero value is ready; it is
// safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []keyops.Event
}

// Audit keeps e.
func (r *Recorder) Audit(_ context.Context, e keyops.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

// Events returns a copy of the events so far, in order.
func (r *Recorder) Events() []keyops.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]keyops.Event(nil), r.events...)
}
