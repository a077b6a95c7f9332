package usage

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Flusher drains Counters into a Store every Interval, in its own
// goroutine, and once more on Close. A failed flush is logged and its
// counts are lost (the store is not retried with old deltas, so that a
// Redis outage cannot grow memory).
type Flusher struct {
	Counters *Counters
	Store    Store
	Interval time.Duration
	Logger   *zap.Logger
	// OnFlush, when set, is called after each flush that sent something,
	// with its outcome (for keygate_usage_flushes_total).
	OnFlush func(err error)

	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

// Start runs the flush loop.
func (f *Flusher) Start() {
	if f.Interval <= 0 {
		f.Interval = time.Second
	}
	if f.Logger == nil {
		f.Logger = zap.NewNop()
	}
	f.stop = make(chan struct{})
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		t := time.NewTicker(f.Interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				f.Flush()
			case <-f.stop:
				return
			}
		}
	}()
}

// Flush drains and writes once; a drain with nothing in it writes nothing.
func (f *Flusher) Flush() {
	ds := f.Counters.Drain()
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := f.Store.Flush(ctx, ds, time.Now())
	switch {
	case errors.Is(err, errKept):
		f.Logger.Warn("usage flush not written; its counts are kept for the next", zap.Int("keys", len(ds)), zap.Error(err))
	case err != nil:
		f.Logger.Warn("usage flush failed; its counts are lost", zap.Int("keys", len(ds)), zap.Error(err))
	}
	if f.OnFlush != nil {
		f.OnFlush(err)
	}
}

// Syncer is a Store that may hold flushed counts back (FileStore, when
// its journal could not be appended to); Sync writes them.
type Syncer interface {
	Sync(ctx context.Context) error
}

// Close stops the loop, flushes what is left, and syncs a Syncer store.
func (f *Flusher) Close() error {
	f.once.Do(func() {
		if f.stop != nil {
			close(f.stop)
			f.done.Wait()
		}
		f.Flush()
		if s, ok := f.Store.(Syncer); ok {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.Sync(ctx); err != nil && f.Logger != nil {
				f.Logger.Warn("usage sync failed; counts since the last write are lost", zap.Error(err))
			}
		}
	})
	return nil
}
