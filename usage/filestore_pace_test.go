package usage

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

var _ Syncer = (*FileStore)(nil)

// TestFileStorePacesRewrites: while the last rewrite is recent (by its
// own duration), a flush is merged in memory and the file keeps the
// counts as last written; the store's own reads see every flush, another
// reader sees them after Sync, which the flusher's Close calls.
func TestFileStorePacesRewrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
	now := time.Date(2026, 11, 24, 10, 30, 0, 0, time.UTC)
	s := &FileStore{Path: path}
	flush := func(n int64) {
		t.Helper()
		if err := s.Flush(ctx, []Delta{{ID: "key_a", Counts: Counts{Admitted: n}, LastUsed: now}}, now); err != nil {
			t.Fatal(err)
		}
	}
	read := func(s *FileStore) int64 {
		t.Helper()
		c, _, err := s.Read(ctx, []string{"key_a"}, time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		return c.Admitted
	}
	flush(1) // the first flush writes
	if got := read(&FileStore{Path: path}); got != 1 {
		t.Fatalf("file after the first flush: %d admitted, want 1", got)
	}
	s.writeCost = time.Hour // as if the rewrite were slow: the next waits
	flush(2)
	if got := read(&FileStore{Path: path}); got != 1 {
		t.Errorf("file right after a slow rewrite: %d admitted, want 1 (the flush held back)", got)
	}
	if got := read(s); got != 3 {
		t.Errorf("the store's own read: %d admitted, want 3", got)
	}
	f := &Flusher{Counters: NewCounters(0), Store: s, Interval: time.Hour}
	f.Start()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := read(&FileStore{Path: path}); got != 3 {
		t.Errorf("file after the flusher's Close: %d admitted, want 3", got)
	}
	s.writeCost = 0 // a fast rewrite: every flush writes
	flush(4)
	if got := read(&FileStore{Path: path}); got != 7 {
		t.Errorf("file after a flush that a fast rewrite allows: %d admitted, want 7", got)
	}
}
