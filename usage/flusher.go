package usage

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// FlusherConfig configures a Flusher.
type FlusherConfig struct {
	// Counters are drained at each flush. Required.
	Counters *Counters
	// Store receives each flush. Required.
	Store Store
	// Interval is how often the counts are flushed. Default 1s.
	Interval time.Duration
	// Logger receives failed flushes; nil means none.
	Logger *zap.Logger
	// OnFlush, when set, is called after each flush that sent something,
	// with its outcome (for keygate_usage_flushes_total).
	OnFlush func(err error)
}

// Flusher drains Counters into a Store every Interval, in its own
// goroutine, and once more on Close. A failed flush is logged and its
// counts are lost (the store is not retried with old deltas, so that a
// Redis outage cannot grow memory). Build it with NewFlusher; its methods
// are safe for concurrent use.
type Flusher struct {
	cfg  FlusherConfig
	base context.Context // the values of NewFlusher's ctx, never its end
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewFlusher starts flushing cfg.Counters into cfg.Store every
// cfg.Interval until Close. The flushes carry ctx's values but not its
// cancellation: the last one runs in Close, after the caller's context
// may have ended.
func NewFlusher(ctx context.Context, cfg FlusherConfig) (*Flusher, error) {
	if cfg.Counters == nil || cfg.Store == nil {
		return nil, errors.New("usage: a Flusher needs Counters and a Store")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	f := &Flusher{cfg: cfg, base: context.WithoutCancel(ctx), stop: make(chan struct{}), done: make(chan struct{})}
	go f.loop()
	return f, nil
}

func (f *Flusher) loop() {
	defer close(f.done)
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.Flush()
		case <-f.stop:
			return
		}
	}
}

// Flush drains and writes once; a drain with nothing in it writes nothing.
func (f *Flusher) Flush() {
	ds := f.cfg.Counters.Drain()
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(f.base, 5*time.Second)
	defer cancel()
	err := f.cfg.Store.Flush(ctx, ds, time.Now())
	switch {
	case errors.Is(err, errKept):
		f.cfg.Logger.Warn("usage flush not written; its counts are kept for the next", zap.Int("keys", len(ds)), zap.Error(err))
	case err != nil:
		f.cfg.Logger.Warn("usage flush failed; its counts are lost", zap.Int("keys", len(ds)), zap.Error(err))
	}
	if f.cfg.OnFlush != nil {
		f.cfg.OnFlush(err)
	}
}

// Syncer is a Store that may hold flushed counts back (FileStore, when
// its journal could not be appended to); Sync writes them.
type Syncer interface {
	Sync(ctx context.Context) error
}

// Close stops the loop, flushes what is left, and syncs a Syncer store.
// A second Close does nothing.
func (f *Flusher) Close() error {
	f.once.Do(func() {
		close(f.stop)
		<-f.done
		f.Flush()
		if s, ok := f.cfg.Store.(Syncer); ok {
			ctx, cancel := context.WithTimeout(f.base, 5*time.Second)
			defer cancel()
			if err := s.Sync(ctx); err != nil {
				f.cfg.Logger.Warn("usage sync failed; counts since the last write are lost", zap.Error(err))
			}
		}
	})
	return nil
}
