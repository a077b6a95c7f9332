package keystore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/filewatch"

	"go.uber.org/zap"

	"github.com/keygate/keygate/policy"
)

// FileConfig configures a FileStore.
type FileConfig struct {
	// Path is the keystore file. It need not exist yet: an absent file is
	// an empty keystore, picked up once it is created.
	Path string
	// PollInterval is how often the file is stat'ed, as a fallback for
	// filesystems that deliver no change events. Zero means 1s.
	PollInterval time.Duration
	// NoWatch turns off change events (fsnotify) and relies on the poll
	// alone.
	NoWatch bool
	// Logger receives reload messages; nil means none.
	Logger *zap.Logger
	// OnReload, if set, is called after every load attempt, including the
	// first, with the number of keys now served and the error, if any. After
	// a failed reload the last good keystore keeps serving and keys is its
	// size. It is called from one goroutine at a time.
	OnReload func(keys int, err error)
	// Limits, when set, resolves each key's effective limit (its and its
	// consumer's plan and override) at every load, into Record.Limits.
	Limits *policy.Resolver
}

// DefaultPollInterval is the poll interval when FileConfig.PollInterval is
// zero.
const DefaultPollInterval = time.Second

// Validate checks the config. FileConfig is not a section of keygate's
// configuration file (its keystore.file option sets Path), so messages
// name the Go field.
func (c FileConfig) Validate() error {
	if c.Path == "" {
		return errors.New("keystore: FileConfig.Path: required")
	}
	if c.PollInterval < 0 {
		return fmt.Errorf("keystore: FileConfig.PollInterval: must not be negative, got %s", c.PollInterval)
	}
	return nil
}

// FileStore serves key lookups from a YAML keystore file and reloads it
// when it changes (fsnotify on the file's directory, plus a stat poll).
// A reload that fails leaves the last good keystore serving. A keystore
// never shrinks to nothing (revocation is a status change, not a
// deletion), so once keys were served, a file that is missing, empty,
// whitespace-only or lists no keys is a failed reload too: it is a file
// being rewritten in place, truncated or deleted by mistake. (An absent
// or empty file at start is an empty keystore.) Its methods are
// safe for concurrent use. Create it with OpenFile; the zero value is not
// usable.
type FileStore struct {
	path     string
	poll     time.Duration
	log      *zap.Logger
	onReload func(int, error)
	limits   limitResolver

	snap atomic.Pointer[snapshot]

	watch *filewatch.Watcher
}

type snapshot struct {
	byHash map[Hash]Record
}

// OpenFile loads the keystore at cfg.Path and starts watching it. A file
// that does not exist is an empty keystore; a file that exists and does not
// parse is an error.
func OpenFile(cfg FileConfig) (*FileStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &FileStore{
		path:     filepath.Clean(cfg.Path),
		poll:     cfg.PollInterval,
		log:      cfg.Logger,
		onReload: cfg.OnReload,
		limits:   limitResolver{cfg.Limits},
	}
	if s.poll == 0 {
		s.poll = DefaultPollInterval
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	// Stat before the first read, so that a write during it is noticed.
	base := filewatch.StatOf(s.path)
	if err := s.reload(); err != nil {
		return nil, err
	}
	s.watch = filewatch.Start(filewatch.Config{
		Baseline: []filewatch.Stat{base},
		Paths:    []string{s.path},
		Poll:     s.poll,
		NoEvents: cfg.NoWatch,
		OnChange: func() { _ = s.reload() },
		OnError: func(err error) {
			s.log.Warn("keystore: file watch error; polling continues", zap.String("path", s.path), zap.Error(err))
		},
	})
	return s, nil
}

// reload reads the file and, if it is good, swaps it in.
func (s *FileStore) reload() error {
	_, statErr := os.Stat(s.path)
	exists := statErr == nil
	doc, err := readDoc(s.path)
	recs := doc.Keys
	if err == nil && len(recs) == 0 && s.Len() > 0 {
		what := "is empty or lists no keys"
		if !exists {
			what = "is missing"
		}
		err = fmt.Errorf("keystore file %s: %s after %d keys were served; a keystore never shrinks to nothing (revoke keys, do not delete them), so it is taken for a truncated, emptied or deleted file: %w", s.path, what, s.Len(), ErrKeystoreVanished)
	}
	if err != nil {
		n := s.Len()
		if s.snap.Load() != nil {
			s.log.Error("keystore: reload failed; serving the last good keystore",
				zap.String("path", s.path), zap.Int("keys", n), zap.Error(err))
		}
		if s.onReload != nil {
			s.onReload(n, err)
		}
		return err
	}
	m := make(map[Hash]Record, len(recs))
	for _, r := range recs {
		m[r.Hash] = r
	}
	if old := s.snap.Load(); old != nil {
		removed := 0
		for h := range old.byHash {
			if _, ok := m[h]; !ok {
				removed++
			}
		}
		if removed > 0 {
			s.log.Warn("keystore: reload removed keys; revoke keys instead of deleting them (a file truncated between two records looks like this too)",
				zap.String("path", s.path), zap.Int("removed", removed), zap.Int("keys", len(m)))
		}
	}
	s.limits.resolveAll(m, consumerMap(doc.Consumers), time.Now())
	prev := s.snap.Swap(&snapshot{byHash: m})
	if prev == nil {
		s.log.Info("keystore: loaded", zap.String("path", s.path), zap.Int("keys", len(m)), zap.Bool("exists", exists))
	} else {
		s.log.Info("keystore: reloaded", zap.String("path", s.path), zap.Int("keys", len(m)), zap.Bool("exists", exists))
	}
	if s.onReload != nil {
		s.onReload(len(m), nil)
	}
	return nil
}

// Lookup returns the record whose key hashes to h. It reports found for
// revoked, rotated and expired keys too: the caller decides with
// Record.StateAt. It never returns an error; the error is there for stores
// that can fail.
func (s *FileStore) Lookup(_ context.Context, h Hash) (Record, bool, error) {
	snap := s.snap.Load()
	if snap == nil {
		return Record{}, false, nil
	}
	r, ok := snap.byHash[h]
	if !ok || !r.Hash.Equal(h) {
		return Record{}, false, nil
	}
	return r, true, nil
}

// Len returns the number of records being served.
func (s *FileStore) Len() int {
	if snap := s.snap.Load(); snap != nil {
		return len(snap.byHash)
	}
	return 0
}

// Ready reports whether a keystore is loaded (an absent file counts as
// loaded and empty). It is true from OpenFile on.
func (s *FileStore) Ready() bool { return s.snap.Load() != nil }

// Close stops watching the file.
func (s *FileStore) Close() error { return s.watch.Close() }
