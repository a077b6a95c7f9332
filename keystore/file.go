package keystore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
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

// filePoll is how often the file is stat'ed, as a fallback for
// filesystems that deliver no change events (and for a directory that
// does not exist yet, which cannot be watched).
const filePoll = time.Second

// Validate checks the config. FileConfig is not a section of keygate's
// configuration file (its keystore.file option sets Path), so messages
// name the Go field.
func (c FileConfig) Validate() error {
	if c.Path == "" {
		return errors.New("keystore: FileConfig.Path: required")
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
	log      *zap.Logger
	onReload func(int, error)
	limits   limitResolver

	snap atomic.Pointer[index] // see index; set by the first load
	gen  uint32                // the current reload (see update)
	cons map[string]Consumer   // the consumers of the last good load

	watch *filewatch.Watcher
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
		log:      cfg.Logger,
		onReload: cfg.OnReload,
		limits:   limitResolver{cfg.Limits},
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
		Poll:     filePoll,
		OnChange: func() { _ = s.reload() },
		OnError: func(err error) {
			s.log.Warn("keystore: file watch error; polling continues", zap.String("path", s.path), zap.Error(err))
		},
	})
	return s, nil
}

// reload reads the file: the first time into a new index, then into
// the live one (update).
func (s *FileStore) reload() error {
	_, statErr := os.Stat(s.path)
	exists := statErr == nil
	if s.snap.Load() != nil {
		return s.update(exists)
	}
	x, cons, err := s.read()
	if err != nil {
		if s.onReload != nil {
			s.onReload(0, err)
		}
		return err
	}
	s.cons = cons
	s.snap.Store(x)
	n := x.len()
	s.log.Info("keystore: loaded", zap.String("path", s.path), zap.Int("keys", n), zap.Bool("exists", exists))
	if s.onReload != nil {
		s.onReload(n, nil)
	}
	return nil
}

// update reloads the file into the live index, reading it once: see
// fileReload. A bad file changes nothing.
func (s *FileStore) update(exists bool) error {
	x := s.snap.Load()
	fail := func(err error) error {
		n := s.Len()
		s.log.Error("keystore: reload failed; serving the last good keystore",
			zap.String("path", s.path), zap.Int("keys", n), zap.Error(err))
		if s.onReload != nil {
			s.onReload(n, err)
		}
		return err
	}
	s.gen++
	rl := newFileReload(x, s.gen, x.len()+x.len()/16)
	f, err := os.Open(s.path)
	var doc fileDoc
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fail(fmt.Errorf("keystore file: %w", err))
	default:
		defer f.Close()
		if doc, err = rl.read(f, s.path); err != nil {
			return fail(err)
		}
	}
	if rl.n == 0 && s.Len() > 0 {
		what := "is empty or lists no keys"
		if !exists {
			what = "is missing"
		}
		return fail(fmt.Errorf("keystore file %s: %s after %d keys were served; a keystore never shrinks to nothing (revoke keys, do not delete them), so it is taken for a truncated, emptied or deleted file: %w", s.path, what, s.Len(), ErrKeystoreVanished))
	}
	cons := consumerMap(doc.Consumers)
	var resolve func(Record) *policy.Effective
	var recons map[uint32]bool
	if s.limits.res != nil {
		now := time.Now()
		resolve = func(r Record) *policy.Effective { return s.limits.resolve(r, cons, now).Limits }
		recons = x.changedConsumers(s.cons, cons)
	}
	st := rl.apply(resolve, recons)
	s.cons = cons
	if 4*(st.added+st.changed+st.removed) >= rl.n+st.removed {
		// A reload that replaced a quarter of the keys or more (rare: a
		// file rewritten by other means) leaves the old entries and maps
		// as garbage as large as what it keeps; the runtime would hand
		// that memory back to the OS over minutes.
		debug.FreeOSMemory()
	}
	if st.removed > 0 {
		s.log.Warn("keystore: reload removed keys; revoke keys instead of deleting them (a file truncated between two records looks like this too)",
			zap.String("path", s.path), zap.Int("removed", st.removed), zap.Int("keys", rl.n))
	}
	n := x.len()
	s.log.Info("keystore: reloaded", zap.String("path", s.path), zap.Int("keys", n), zap.Bool("exists", exists),
		zap.Int("added", st.added), zap.Int("changed", st.changed), zap.Int("removed", st.removed))
	if s.onReload != nil {
		s.onReload(n, nil)
	}
	return nil
}

// read reads the file into a new index, streaming it through the fast
// reader (file_scan.go): no copy of the file or list of its records is
// held, only the index and the ids seen (to refuse a duplicate). A file
// the fast reader does not know is read by yaml.v3. It returns the
// file's consumers too.
func (s *FileStore) read() (*index, map[string]Consumer, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return newIndex(), nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("keystore file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		// About 270 bytes a record as FileAdmin writes them.
		hint := int(st.Size() / 270)
		x := newIndex()
		x.reserve(hint)
		if x, cons, err := s.scan(f, x); !errors.Is(err, errNotCanonical) {
			return x, cons, err
		}
	}
	doc, err := readDoc(s.path)
	if err != nil {
		return nil, nil, err
	}
	cons := consumerMap(doc.Consumers)
	now := time.Now()
	x := newIndex()
	x.reserve(len(doc.Keys))
	for _, r := range doc.Keys {
		x.put(s.limits.resolve(r, cons, now), 0)
	}
	return x, cons, nil
}

// scan streams f through the fast reader into x. The consumers come
// after the keys in the file, so limits are resolved once all is read.
func (s *FileStore) scan(f *os.File, x *index) (*index, map[string]Consumer, error) {
	// Ids seen, by a 64-bit hash of the id (no copy of the ids): two
	// ids with one hash are told apart by the slow path.
	seed := maphash.MakeSeed()
	ids := make([]uint64, 0, x.cap())
	i := 0
	doc, err := scanDoc(f, func(r Record) error {
		if err := ValidateRecord(r); err != nil {
			return fmt.Errorf("keystore file: keys[%d]: %w", i, err)
		}
		if _, dup := x.get(r.Hash); dup {
			return errNotCanonical // the yaml.v3 path names both entries
		}
		ids = append(ids, maphash.String(seed, r.ID))
		i++
		x.put(r, 0)
		return nil
	})
	if err == nil {
		slices.Sort(ids)
		for j := 1; j < len(ids); j++ {
			if ids[j] == ids[j-1] {
				err = errNotCanonical // a repeated id, or two ids with one hash: the yaml.v3 path
				break
			}
		}
	}
	if errors.Is(err, errNotCanonical) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.path, err)
	}
	if _, err := validateDoc(fileDoc{Consumers: doc.Consumers, AdminTokens: doc.AdminTokens}); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.path, err)
	}
	cons := consumerMap(doc.Consumers)
	if s.limits.res != nil {
		now := time.Now()
		x.resolveUnpublished(func(r Record) *policy.Effective { return s.limits.resolve(r, cons, now).Limits })
	}
	return x, cons, nil
}

// Lookup returns the record whose key hashes to h. It reports found for
// revoked, rotated and expired keys too: the caller decides with
// Record.StateAt. The record carries what the request path reads;
// CreatedAt, RevokedAt and ReplacedBy are left zero (FileAdmin reads
// them). It never returns an error; the error is there for stores
// that can fail.
func (s *FileStore) Lookup(_ context.Context, h Hash) (Record, bool, error) {
	x := s.snap.Load()
	if x == nil {
		return Record{}, false, nil
	}
	r, ok := x.get(h)
	return r, ok, nil
}

// Len returns the number of records being served.
func (s *FileStore) Len() int {
	if x := s.snap.Load(); x != nil {
		return x.len()
	}
	return 0
}

// Ready reports whether a keystore is loaded (an absent file counts as
// loaded and empty). It is true from OpenFile on.
func (s *FileStore) Ready() bool { return s.snap.Load() != nil }

// Close stops watching the file.
func (s *FileStore) Close() error { return s.watch.Close() }
