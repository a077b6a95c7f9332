package usage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// crashFS is the OS's file system with a log of every change a
// FileStore makes through it, from which a test rebuilds what a power
// cut after any change could leave on disk. It models what POSIX
// promises and no more: a file's data is durable up to its last Sync,
// and the directory's entries (the renames) up to its last SyncDir;
// past those, any part of the data and any of the renames may be lost.
type crashFS struct {
	osFS
	mu   sync.Mutex
	ops  []fsOp
	next int
	// names is the file id at each name, as the OS has it now.
	names map[string]int
}

type fsOpKind uint8

const (
	opWrite fsOpKind = iota
	opTruncate
	opSync
	opRename // of the file id to name
	opRemove
	opSyncDir
	opFlushed // a mark: flush n returned
	opFlushing
)

type fsOp struct {
	kind fsOpKind
	id   int
	name string
	data []byte
	size int64
	n    int // the flush of a mark
}

func newCrashFS() *crashFS { return &crashFS{names: map[string]int{}} }

func (c *crashFS) log(op fsOp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch op.kind {
	case opRename:
		c.names[op.name] = op.id
	case opRemove:
		delete(c.names, op.name)
	}
	c.ops = append(c.ops, op)
}

func (c *crashFS) CreateTemp(dir, pattern string) (file, error) {
	f, err := c.osFS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.next++
	id := c.next
	c.names[f.Name()] = id
	c.mu.Unlock()
	return &crashFile{file: f, fs: c, id: id}, nil
}

func (c *crashFS) OpenAppend(name string) (file, error) {
	f, err := c.osFS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	id, ok := c.names[name]
	c.mu.Unlock()
	if !ok {
		panic("crashFS: " + name + " was not written through it")
	}
	return &crashFile{file: f, fs: c, id: id}, nil
}

func (c *crashFS) Rename(from, to string) error {
	if err := c.osFS.Rename(from, to); err != nil {
		return err
	}
	c.mu.Lock()
	id := c.names[from]
	delete(c.names, from)
	c.mu.Unlock()
	c.log(fsOp{kind: opRename, id: id, name: to})
	return nil
}

func (c *crashFS) Remove(name string) error {
	if err := c.osFS.Remove(name); err != nil {
		return err
	}
	c.log(fsOp{kind: opRemove, name: name})
	return nil
}

func (c *crashFS) SyncDir(dir string) error {
	if err := c.osFS.SyncDir(dir); err != nil {
		return err
	}
	c.log(fsOp{kind: opSyncDir})
	return nil
}

type crashFile struct {
	file
	fs *crashFS
	id int
}

func (f *crashFile) Write(b []byte) (int, error) {
	n, err := f.file.Write(b)
	f.fs.log(fsOp{kind: opWrite, id: f.id, data: slices.Clone(b[:n])})
	return n, err
}

func (f *crashFile) Truncate(size int64) error {
	if err := f.file.Truncate(size); err != nil {
		return err
	}
	f.fs.log(fsOp{kind: opTruncate, id: f.id, size: size})
	return nil
}

func (f *crashFile) Sync() error {
	if err := f.file.Sync(); err != nil {
		return err
	}
	f.fs.log(fsOp{kind: opSync, id: f.id})
	return nil
}

// disk is the state after a prefix of the log: each file's data now and
// as synced, the names as synced, and the renames and removals since.
type disk struct {
	now, synced map[int][]byte
	names       map[string]int
	pending     []fsOp
	// flushed is the last flush that returned, flushing one under way
	// (0: none).
	flushed, flushing int
}

func (c *crashFS) diskAt(k int) disk {
	d := disk{now: map[int][]byte{}, synced: map[int][]byte{}, names: map[string]int{}}
	for _, op := range c.ops[:k] {
		switch op.kind {
		case opWrite:
			d.now[op.id] = append(d.now[op.id], op.data...)
		case opTruncate:
			d.now[op.id] = d.now[op.id][:op.size]
		case opSync:
			d.synced[op.id] = slices.Clone(d.now[op.id])
		case opRename, opRemove:
			d.pending = append(d.pending, op)
		case opSyncDir:
			d.names = apply(d.names, d.pending)
			d.pending = nil
		case opFlushing:
			d.flushing = op.n
		case opFlushed:
			d.flushed, d.flushing = op.n, 0
		}
	}
	return d
}

func apply(names map[string]int, ops []fsOp) map[string]int {
	out := make(map[string]int, len(names))
	for n, id := range names {
		out[n] = id
	}
	for _, op := range ops {
		if op.kind == opRename {
			out[op.name] = op.id
		} else {
			delete(out, op.name)
		}
	}
	return out
}

// dataKept is how much of a file's data written since its last sync a
// power cut kept.
type dataKept int

const (
	keptNone dataKept = iota
	keptHalf
	keptAll
)

func (k dataKept) String() string { return [...]string{"none", "half", "all"}[k] }

// contents is file id's data after a power cut that kept k of what was
// not synced.
func (d disk) contents(id int, k dataKept) []byte {
	synced, now := d.synced[id], d.now[id]
	switch {
	case k == keptAll:
		return now
	case k == keptHalf && len(now) > len(synced) && string(now[:len(synced)]) == string(synced):
		return now[:len(synced)+(len(now)-len(synced))/2]
	}
	return synced
}

// outcomes yields every state a power cut could leave of d: each subset
// of the renames and removals not synced (in their order; the first 8
// at most, then all or none of the rest), with none, half or all of the
// data not synced.
func (d disk) outcomes(yield func(what string, files map[string][]byte) bool) {
	n := min(len(d.pending), 8)
	for mask := 0; mask < 1<<n; mask++ {
		for _, rest := range []bool{false, true} {
			if rest && len(d.pending) == n {
				continue
			}
			var ops []fsOp
			for i, op := range d.pending {
				if i < n && mask&(1<<i) != 0 || i >= n && rest {
					ops = append(ops, op)
				}
			}
			names := apply(d.names, ops)
			for k := keptNone; k <= keptAll; k++ {
				files := map[string][]byte{}
				for name, id := range names {
					files[filepath.Base(name)] = d.contents(id, k)
				}
				if !yield(fmt.Sprintf("%d of %d renames kept (mask %b), data not synced kept: %s", len(ops), len(d.pending), mask, k), files) {
					return
				}
			}
		}
	}
}

// usageView is what a reader reads of a store: each key's admitted
// requests by hour, its requests with the key itself by day, and its
// last use.
type usageView map[string]keyView

type keyView struct {
	hours    map[uint32]int64
	days     map[uint32]int64
	lastUsed time.Time
}

func viewOf(d *usageData) usageView {
	v := usageView{}
	for id, k := range d.keys {
		kv := keyView{hours: map[uint32]int64{}, days: map[uint32]int64{}, lastUsed: k.lastUsed}
		for h, c := range k.hours.all() {
			kv.hours[h] = c.Admitted
		}
		for _, dd := range k.days {
			kv.days[dd.day] = dd.apiKey
		}
		v[id] = kv
	}
	return v
}

// between reports how got differs from what a reader may read after a
// power cut: each count, and each last use, from its value after the
// last flush that returned (lo) to its value after the flush under way
// (hi; lo when none was), since any of that flush's lines may have been
// kept. "" when it does not differ.
func between(got, lo, hi usageView) string {
	var diffs []string
	ids := map[string]bool{}
	for _, v := range []usageView{got, lo, hi} {
		for id := range v {
			ids[id] = true
		}
	}
	for id := range ids {
		g, a, b := got[id], lo[id], hi[id]
		for _, p := range []struct {
			what    string
			g, a, b map[uint32]int64
		}{{"hour", g.hours, a.hours, b.hours}, {"day", g.days, a.days, b.days}} {
			ps := map[uint32]bool{}
			for _, m := range []map[uint32]int64{p.g, p.a, p.b} {
				for q := range m {
					ps[q] = true
				}
			}
			for q := range ps {
				if v, x, y := p.g[q], p.a[q], p.b[q]; v < min(x, y) || v > max(x, y) {
					diffs = append(diffs, fmt.Sprintf("%s %s %d: read %d, want %d to %d", id, p.what, q, v, x, y))
				}
			}
		}
		early, late := a.lastUsed, b.lastUsed
		if late.Before(early) {
			early, late = late, early
		}
		if g.lastUsed.Before(early) || g.lastUsed.After(late) {
			diffs = append(diffs, fmt.Sprintf("%s last used %s, want %s to %s", id, g.lastUsed, early, late))
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; ")
}

// TestFileStoreSurvivesAPowerCut cuts the power, in the model of
// crashFS, after every change that two owners of the usage files make
// over seven flushes (the first flush's rewrite, appends, rewrites when
// the journal outgrows the snapshot, one when a week-old hour is
// dropped, and a second owner appending to the first's journal), and in
// every way the cut could leave the files. Each time a reader must read
// every flush that returned, and of the one under way none, some or all
// of its lines, never an error; and a new owner must go on counting
// from what it read.
func TestFileStoreSurvivesAPowerCut(t *testing.T) {
	defer func(m int64) { journalMin = m }(journalMin)
	journalMin = 300 // a rewrite every few flushes
	ctx := context.Background()
	base := "keys.yaml.usage.json"
	path := filepath.Join(t.TempDir(), base)
	cfs := newCrashFS()
	views := []usageView{{}} // views[n]: the owner's counts after flush n
	flush := func(s *FileStore, at time.Time, ds ...Delta) {
		t.Helper()
		n := len(views)
		cfs.log(fsOp{kind: opFlushing, n: n})
		if err := s.Flush(ctx, ds, at); err != nil {
			t.Fatalf("flush %d: %v", n, err)
		}
		cfs.log(fsOp{kind: opFlushed, n: n})
		views = append(views, viewOf(s.data))
	}
	delta := func(id string, n int64, at time.Time) Delta {
		return Delta{ID: id, Counts: Counts{Admitted: n}, LastUsed: at, APIKey: n, LastAPIKey: at}
	}
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := &FileStore{Path: path, fsys: cfs}
	flush(s, at(0), delta("key_a", 1, at(0)), delta("key_b", 2, at(0)))
	flush(s, at(time.Minute), delta("key_a", 1, at(time.Minute)))
	flush(s, at(2*time.Minute), delta("key_b", 1, at(2*time.Minute)), delta("key_c", 5, at(2*time.Minute)))
	flush(s, at(time.Hour), delta("key_a", 1, at(time.Hour)))
	flush(s, at(time.Hour+time.Minute), delta("key_c", 2, at(time.Hour+time.Minute)))
	flush(s, at(8*24*time.Hour), delta("key_c", 1, at(8*24*time.Hour))) // drops the first day's hours
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = &FileStore{Path: path, fsys: cfs}
	flush(s, at(8*24*time.Hour+time.Minute), delta("key_a", 1, at(8*24*time.Hour+time.Minute)))
	flush(s, at(8*24*time.Hour+2*time.Minute), delta("key_d", 3, at(8*24*time.Hour+2*time.Minute)))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	var kinds [opFlushing + 1]int
	for _, op := range cfs.ops {
		kinds[op.kind]++
	}
	if kinds[opSync] == 0 || kinds[opRename] < 6 || kinds[opTruncate] != 0 {
		t.Fatalf("the flushes made %d syncs, %d renames and %d truncations: want some syncs, the renames of three rewrites and no truncation", kinds[opSync], kinds[opRename], kinds[opTruncate])
	}
	dir := t.TempDir()
	states := 0
	for k := 0; k <= len(cfs.ops); k++ {
		d := cfs.diskAt(k)
		lo, hi := views[d.flushed], views[d.flushed]
		if d.flushing != 0 {
			hi = views[d.flushing]
		}
		for what, files := range d.outcomes {
			states++
			cut := fmt.Sprintf("power cut after change %d of %d (flush %d returned, %d under way; %s)", k, len(cfs.ops), d.flushed, d.flushing, what)
			materialize(t, dir, files)
			got, err := (&FileStore{Path: filepath.Join(dir, base)}).read(nil)
			if err != nil {
				t.Fatalf("%s: read: %v", cut, err)
			}
			if diff := between(viewOf(got.data), lo, hi); diff != "" {
				t.Fatalf("%s: %s", cut, diff)
			}
			// The next owner counts on from what it reads.
			owner := &FileStore{Path: filepath.Join(dir, base)}
			next := at(9 * 24 * time.Hour)
			if err := owner.Flush(ctx, []Delta{delta("key_a", 7, next)}, next); err != nil {
				t.Fatalf("%s: the next owner's flush: %v", cut, err)
			}
			want := viewOf(owner.data)
			owner.Close()
			again, err := (&FileStore{Path: filepath.Join(dir, base)}).read(nil)
			if err != nil {
				t.Fatalf("%s: read after the next owner's flush: %v", cut, err)
			}
			if diff := between(viewOf(again.data), want, want); diff != "" {
				t.Fatalf("%s: after the next owner's flush: %s", cut, diff)
			}
		}
	}
	t.Logf("%d changes, %d states after a power cut", len(cfs.ops), states)
}

// materialize makes dir hold files, and nothing else.
func materialize(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSyncDirWhereDirectoriesCannotBeSynced: on a file system that
// refuses to sync a directory (EINVAL, as procfs does, and as some
// network and container mounts do), a flush's rewrite must not fail,
// or every flush after it would fail the same way.
func TestSyncDirWhereDirectoriesCannotBeSynced(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procfs is Linux's")
	}
	if err := (osFS{}).SyncDir("/proc/self"); err != nil {
		t.Errorf("SyncDir of a directory that cannot be synced: %v, want nil", err)
	}
	if err := (osFS{}).SyncDir(filepath.Join(t.TempDir(), "gone")); err == nil {
		t.Error("SyncDir of a missing directory: nil, want its error")
	}
}
