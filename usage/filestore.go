package usage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// FileStore keeps the buckets in two files beside the file keystore:
// a snapshot, the JSON document KEYS_FILE.usage.json, and a journal,
// KEYS_FILE.usage.json.journal, to which every flush appends one line
// per key it counted (journal.go). One gateway process owns them; the
// CLI only reads them: the snapshot, then the journal's lines over it.
//
// A flush costs what it counted, not every key the store holds: a
// snapshot of 100k keys used in the last 7 days takes about a tenth of a
// second to write, a million keys' about a second. The snapshot is
// rewritten (atomically: a temp file and a rename) only when a flush
// has grown the journal past it (or past journalMin, for a small one),
// or dropped buckets past Retention, so the bytes written stay within
// about twice what the flushes appended. Every flush is on disk when
// Flush returns, synced (fsys.go): a crash, even a power cut, loses
// only the counts not yet flushed, and the CLI reads every flush.
//
// In memory, each key's hours are packed records (hourList) and its days
// a short slice, sorted by time, with no pointers in them (see
// keyUsage): a key used in one hour holds 195 bytes, in 24 hours 324,
// and in every hour of a week 1.3 KB (BenchmarkFileStoreMemory), where
// a slice of 88-byte hours held 243 bytes, 2.5 KB and 16.8 KB, and a map
// per key and per period 1.7 KB for one hour; and the collector has one
// to three objects a key to mark instead of a dozen.
type FileStore struct {
	Path string
	mu   sync.Mutex
	data *usageData
	// gen is the journal generation of the snapshot last written or
	// read; journal is the journal open for appending (nil: the next
	// flush rewrites the snapshot and starts a journal), journalSize its
	// size and snapSize the snapshot's.
	gen         uint64
	journal     file
	journalSize int64
	snapSize    int64
	// line writes a flush's journal lines, its buffer reused.
	line jsonWriter
	// pruned is the hour of the last pass that dropped expired buckets.
	pruned uint32
	// fsys is where the files are written (nil: the OS's; see fsys.go).
	fsys fileSystem
}

// journalMin is the size to which a journal may grow whatever the
// snapshot's size: below it a rewrite costs little, and so does reading
// the journal back.
var journalMin int64 = 1 << 20

// usageData is the file's counts in memory, by key id.
type usageData struct {
	keys map[string]*keyUsage
}

// keyUsage is one key's counts: its hours (YYYYMMDDHH, packed: see
// hourList) and days (YYYYMMDD) as numbers, each list sorted and without
// repeats, and its last uses (zero: none). It is never copied: its
// lists may point into it.
type keyUsage struct {
	hours      hourList
	days       []dayCounts
	lastUsed   time.Time
	lastAPIKey time.Time
	// day is where a key's first day is kept (days points into it until
	// it outgrows it), as hours keeps its first hours: most keys are
	// then one object for the collector to mark, not two. (A nil list is
	// one the file does not have, an empty one one it has empty.)
	day [1]dayCounts
}

type hourCounts struct {
	hour uint32
	c    Counts
}

type dayCounts struct {
	day            uint32
	apiKey, bearer int64
}

// hourNum and dayNum are hour(t) and day(t) as numbers.
func hourNum(t time.Time) uint32 {
	t = t.UTC()
	y, m, d := t.Date()
	return ((uint32(y)*100+uint32(m))*100+uint32(d))*100 + uint32(t.Hour())
}

func dayNum(t time.Time) uint32 { return hourNum(t) / 100 }

// period parses a bucket's name in the file: n digits (10 for an hour, 8
// for a day), nothing else.
func period(s string, n int) (uint32, error) {
	if len(s) != n {
		return 0, fmt.Errorf("bad period %q: want %d digits", s, n)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("bad period %q: want %d digits", s, n)
		}
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad period %q: %w", s, err)
	}
	return uint32(v), nil
}

// at returns the element of list for period p, adding a zero one in
// order if there is none. Flushes come in time order, so the period is
// nearly always the last one or a new one after it.
func at[T any](list []T, p uint32, of func(*T) *uint32) ([]T, *T) {
	if n := len(list); n > 0 && *of(&list[n-1]) == p {
		return list, &list[n-1]
	}
	i, found := slices.BinarySearchFunc(list, p, func(x T, p uint32) int { return cmp.Compare(*of(&x), p) })
	if !found {
		if len(list) == cap(list) {
			// A key gains a period an hour at most: grow by an eighth,
			// not double, so that a week of hours wastes little.
			list = append(make([]T, 0, len(list)+max(1, len(list)/8)), list...)
		}
		var zero T
		*of(&zero) = p
		list = slices.Insert(list, i, zero)
	}
	return list, &list[i]
}

// find returns the element of list for period p, if there is one.
func find[T any](list []T, p uint32, of func(*T) *uint32) (*T, bool) {
	i, found := slices.BinarySearchFunc(list, p, func(x T, p uint32) int { return cmp.Compare(*of(&x), p) })
	if !found {
		return nil, false
	}
	return &list[i], true
}

func hourOf(h *hourCounts) *uint32 { return &h.hour }
func dayOf(d *dayCounts) *uint32   { return &d.day }

func newUsageData() *usageData { return &usageData{keys: map[string]*keyUsage{}} }

// key returns id's usage, adding it if it has none.
func (d *usageData) key(id string) *keyUsage {
	k := d.keys[id]
	if k == nil {
		k = &keyUsage{}
		d.keys[id] = k
	}
	return k
}

// fileData is the usage file's JSON document.
type fileData struct {
	// Buckets: key id -> hour (YYYYMMDDHH) -> counts.
	Buckets  map[string]map[string]Counts `json:"buckets"`
	LastUsed map[string]time.Time         `json:"last_used_at"`
	// Methods: key id -> day (YYYYMMDD) -> counts by method;
	// LastAPIKey: key id -> its last request with the key itself.
	Methods    map[string]map[string]MethodCounts `json:"methods,omitempty"`
	LastAPIKey map[string]time.Time               `json:"last_api_key_at,omitempty"`
	// JournalGen is the generation of the journal whose lines count on
	// top of this snapshot (see FileStore).
	JournalGen uint64 `json:"journal_gen,omitempty"`
}

// periods turns one key's section of the file (period name, of digits
// digits, to counts) into its list, sorted, in inline's memory when it
// fits there. The list is never nil: the file has the section.
func periods[T, C any](inline []T, named map[string]C, digits int, of func(*T) *uint32, elem func(uint32, C) T) ([]T, error) {
	l := inline
	if len(named) > cap(l) {
		l = make([]T, 0, len(named))
	}
	for name, c := range named {
		p, err := period(name, digits)
		if err != nil {
			return nil, err
		}
		l = append(l, elem(p, c))
	}
	slices.SortFunc(l, func(a, b T) int { return cmp.Compare(*of(&a), *of(&b)) })
	return l, nil
}

// setHours sets id's hours to the file's section of them (period name
// to counts); setDays, setLastUsed and setLastAPIKey set its other
// sections. A bucket whose name is not a period is an error: nothing
// else writes one.
func (d *usageData) setHours(id string, hs map[string]Counts) error {
	var buf [8]hourCounts
	l, err := periods(buf[:0], hs, 10, hourOf, func(h uint32, c Counts) hourCounts { return hourCounts{h, c} })
	if err != nil {
		return fmt.Errorf("buckets of %q: %w", id, err)
	}
	d.key(id).hours.set(l)
	return nil
}

func (d *usageData) setDays(id string, ds map[string]MethodCounts) error {
	k := d.key(id)
	var err error
	if k.days, err = periods(k.day[:0], ds, 8, dayOf, func(dd uint32, c MethodCounts) dayCounts { return dayCounts{dd, c.APIKey, c.Bearer} }); err != nil {
		return fmt.Errorf("methods of %q: %w", id, err)
	}
	return nil
}

func (d *usageData) setLastUsed(id string, t time.Time) error {
	d.key(id).lastUsed = t
	return nil
}

func (d *usageData) setLastAPIKey(id string, t time.Time) error {
	d.key(id).lastAPIKey = t
	return nil
}

// Flush merges the deltas, drops buckets past Retention (once an hour)
// and appends the deltas to the journal, rewriting the snapshot instead
// when the journal has outgrown it, or buckets were dropped (see
// FileStore).
func (s *FileStore) Flush(_ context.Context, ds []Delta, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		if err := s.open(); err != nil {
			return err
		}
	}
	if len(ds) == 0 {
		return nil
	}
	h, today := hourNum(now), dayNum(now)
	for i := range ds {
		s.data.add(&ds[i], h, today)
	}
	pruned := false
	if h != s.pruned {
		s.pruned = h
		pruned = s.data.prune(now)
	}
	if s.journal != nil && !pruned {
		if err := s.append(ds, h, today); err != nil {
			return err
		}
		if s.journalSize <= max(s.snapSize, journalMin) {
			return nil
		}
	}
	if err := s.rewrite(); err != nil {
		return fmt.Errorf("usage file: %w (%w)", err, errKept)
	}
	return nil
}

// append writes the deltas' lines at the journal's end, in chunks of
// about 64 KiB. After a failed write the next flush rewrites the
// snapshot: the counts are in memory.
func (s *FileStore) append(ds []Delta, h, today uint32) error {
	if s.line.b == nil {
		s.line.b = make([]byte, 0, 80<<10)
	}
	s.line.w, s.line.b, s.line.err, s.line.n = s.journal, s.line.b[:0], nil, 0
	for i := range ds {
		s.line.journalLine(&ds[i], h, today)
		s.line.flush(false)
	}
	s.line.flush(true)
	err := s.line.err
	if err == nil {
		err = s.journal.Sync()
	}
	if err != nil {
		// The journal no longer holds what memory does: the next flush
		// rewrites the snapshot. Until then readers read the lines
		// written whole, counts that the snapshot will hold as well.
		if s.line.n > 0 {
			_ = s.journal.Truncate(s.journalSize)
		}
		s.closeJournal()
		return fmt.Errorf("usage journal: %w (%w)", err, errKept)
	}
	s.journalSize += s.line.n
	return nil
}

// errKept marks a failed flush whose counts a FileStore kept: the next
// flush or Sync writes them.
var errKept = errors.New("the counts are kept for the next flush")

// add merges one delta into hour h and day today (the day's counts by
// method only when it has some).
func (d *usageData) add(x *Delta, h, today uint32) {
	k := d.key(x.ID)
	k.hours.add(h, x.Counts)
	if x.LastUsed.After(k.lastUsed) {
		k.lastUsed = x.LastUsed
	}
	if x.APIKey != 0 || x.Bearer != 0 {
		var m *dayCounts
		if k.days == nil {
			k.days = k.day[:0]
		}
		k.days, m = at(k.days, today, dayOf)
		m.apiKey += x.APIKey
		m.bearer += x.Bearer
		if x.LastAPIKey.After(k.lastAPIKey) {
			k.lastAPIKey = x.LastAPIKey
		}
	}
}

// Sync rewrites the snapshot if the last flush could not append to the
// journal; every other flush is on disk already.
func (s *FileStore) Sync(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil || s.journal != nil {
		return nil
	}
	return s.rewrite()
}

// Close closes the journal. The store may be used again: it then reads
// the files afresh.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data = nil
	return s.closeJournal()
}

func (s *FileStore) closeJournal() error {
	if s.journal == nil {
		return nil
	}
	err := s.journal.Close()
	s.journal = nil
	return err
}

// prune drops the buckets past Retention and the days past
// MethodRetention; a key with neither, nor a last use, goes. (Last uses
// are kept: they say when a key was last used, however long ago.) It
// reports whether it dropped anything, which the files then still hold.
func (d *usageData) prune(now time.Time) bool {
	dropped := false
	oldest, oldestDay := hourNum(now.Add(-Retention)), dayNum(now.Add(-MethodRetention))
	for id, k := range d.keys {
		dropped = k.hours.dropBefore(oldest) || dropped
		n := 0
		for n < len(k.days) && k.days[n].day < oldestDay {
			n++
		}
		k.days = drop(k.days, n)
		dropped = dropped || n > 0
		if k.hours.empty() && len(k.days) == 0 && k.lastUsed.IsZero() && k.lastAPIKey.IsZero() {
			delete(d.keys, id)
		}
	}
	return dropped
}

// drop removes list's first n elements, keeping its array (nil when
// none are left).
func drop[T any](list []T, n int) []T {
	if n == 0 {
		return list
	}
	if n == len(list) {
		return nil
	}
	return slices.Delete(list, 0, n)
}

// rewrite writes s.data as a snapshot of the next generation, then
// starts that generation's journal, empty, and keeps it open for the
// flushes' lines (s.mu held). A crash between the two leaves the new
// snapshot beside the old journal, whose lines the snapshot already
// holds: readers skip a journal of another generation.
func (s *FileStore) rewrite() error {
	if err := s.closeJournal(); err != nil {
		return err
	}
	gen := s.gen + 1
	fs, dir := s.fs(), filepath.Dir(s.Path)
	n, err := writeAtomic(fs, s.Path, func(w io.Writer) error { return writeFileData(w, s.data, gen) })
	if err != nil {
		return err
	}
	s.gen, s.snapSize = gen, n
	tmp, err := fs.CreateTemp(dir, ".usage-journal-*")
	if err != nil {
		return err
	}
	// The head is not synced: until an append syncs the journal, head
	// and all, the snapshot holds every count, and a journal without
	// its head is read as none.
	head := journalHead(gen)
	_, err = tmp.Write(head)
	if err == nil {
		err = fs.Rename(tmp.Name(), s.journalPath())
	}
	if err != nil {
		tmp.Close()
		_ = fs.Remove(tmp.Name())
		return err
	}
	if err := fs.SyncDir(dir); err != nil {
		tmp.Close()
		return err
	}
	s.journal, s.journalSize = tmp, int64(len(head))
	return nil
}

// writeAtomic writes a file durably through a temp file beside it, a
// sync, a rename and a sync of the directory, and returns its size.
func writeAtomic(fs fileSystem, path string, write func(io.Writer) error) (int64, error) {
	dir := filepath.Dir(path)
	tmp, err := fs.CreateTemp(dir, ".usage-*")
	if err != nil {
		return 0, err
	}
	err = write(tmp)
	var size int64
	if err == nil {
		size, err = tmp.Seek(0, io.SeekCurrent)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = fs.Remove(tmp.Name())
		return 0, err
	}
	return size, fs.SyncDir(dir)
}

// view calls fn with this store's counts when it has flushed, else with
// the files' counts of ids (a reader in another process, such as the
// CLI, reads only the keys it asks for: see FileStore.read).
func (s *FileStore) view(ids []string, fn func(*usageData)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data != nil {
		fn(s.data)
		return nil
	}
	f, err := s.read(idSet(ids))
	if err != nil {
		return err
	}
	fn(f.data)
	return nil
}

// Read reads the counts (see view).
func (s *FileStore) Read(_ context.Context, ids []string, since time.Duration, now time.Time) (Counts, map[string]time.Time, error) {
	var c Counts
	last := map[string]time.Time{}
	err := s.view(ids, func(d *usageData) {
		for _, id := range ids {
			if k := d.keys[id]; k != nil && !k.lastUsed.IsZero() {
				last[id] = k.lastUsed
			}
		}
		c = sum(d.series(ids, since, now))
	})
	if err != nil {
		return Counts{}, nil, err
	}
	return c, last, nil
}

// Series reads the counts (see view) hour by hour.
func (s *FileStore) Series(_ context.Context, ids []string, since time.Duration, now time.Time) ([]Hour, error) {
	var hs []Hour
	if err := s.view(ids, func(d *usageData) { hs = d.series(ids, since, now) }); err != nil {
		return nil, err
	}
	return hs, nil
}

func (d *usageData) series(ids []string, since time.Duration, now time.Time) []Hour {
	hs := newSeries(since, now)
	if len(hs) == 0 {
		return hs
	}
	// The series' hours are consecutive: hour numbers ascend with them.
	nums := make([]uint32, len(hs))
	for i := range hs {
		nums[i] = hourNum(hs[i].Start)
	}
	for _, id := range ids {
		k := d.keys[id]
		if k == nil {
			continue
		}
		for h, c := range k.hours.all() {
			if h < nums[0] || h > nums[len(nums)-1] {
				continue
			}
			if i, ok := slices.BinarySearch(nums, h); ok {
				hs[i].Add(c)
			}
		}
	}
	return hs
}

// LastUsed returns the last use of each of ids that has one.
func (s *FileStore) LastUsed(_ context.Context, ids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(ids))
	err := s.view(ids, func(d *usageData) {
		for _, id := range ids {
			if k, ok := d.keys[id]; ok && !k.lastUsed.IsZero() {
				out[id] = k.lastUsed
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Forget keeps the last uses of ids (keys that were purged): the file is
// written by the gateway process that flushes to it alone, and the store
// that a purge reads through (the CLI's, the admin API's) must not write
// it. A purged key's counts expire on their own; its last use is one
// line of the file.
func (s *FileStore) Forget(context.Context, []string) error { return nil }

// Methods reads the counts by method (see FileStore.view).
func (s *FileStore) Methods(_ context.Context, ids []string, since time.Duration, now time.Time) (map[string]MethodCounts, error) {
	ds := days(min(since, MaxMethodWindow), now)
	nums := make([]uint32, len(ds))
	for i, dd := range ds {
		v, err := period(dd, 8)
		if err != nil {
			return nil, err
		}
		nums[i] = v
	}
	out := make(map[string]MethodCounts, len(ids))
	err := s.view(ids, func(d *usageData) {
		for _, id := range ids {
			var c MethodCounts
			if k := d.keys[id]; k != nil {
				for _, dd := range nums {
					if m, ok := find(k.days, dd, dayOf); ok {
						c.APIKey += m.apiKey
						c.Bearer += m.bearer
					}
				}
				c.LastAPIKey = k.lastAPIKey
			}
			out[id] = c
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
