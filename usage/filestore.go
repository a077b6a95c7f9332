package usage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// FileStore keeps the buckets in a JSON file (the file keystore's
// companion, keys.yaml.usage.json), rewritten atomically (temp file and
// rename). One gateway process owns the file; the CLI only reads it.
//
// A rewrite costs every key the file holds (all used in the last 7
// days), not the keys of one flush: at 100k keys it takes about a
// quarter of a second of CPU. So Flush merges its deltas in memory at
// once, and rewrites the file only when the last rewrite is at least
// writeSpacing times its own duration old: every flush for a small file,
// about every 5 s at 100k keys, never more than 1/writeSpacing of a
// core. This store's own reads see every flush; another process (the
// CLI) reads the file as last written. Sync writes what is pending
// (Flusher.Close calls it).
//
// In memory, each key's hours and days are short slices sorted by time,
// with no pointers in them (see keyUsage): a key used in one hour holds
// about 200 bytes, where a map per key and per period held 1.7 KB, and
// the collector has a few objects a key to mark instead of a dozen
// (BenchmarkFileStoreMemory).
type FileStore struct {
	Path string
	mu   sync.Mutex
	data *usageData
	// dirty means data holds counts the file does not. lastWrite and
	// writeCost are when the last rewrite ended and how long it took.
	dirty     bool
	lastWrite time.Time
	writeCost time.Duration
	// pruned is the hour of the last pass that dropped expired buckets.
	pruned uint32
}

// writeSpacing paces FileStore's rewrites: at most one per writeSpacing
// times the previous one's duration.
const writeSpacing = 20

// usageData is the file's counts in memory, by key id.
type usageData struct {
	keys map[string]*keyUsage
}

// keyUsage is one key's counts: its hours (YYYYMMDDHH) and days
// (YYYYMMDD) as numbers, each list sorted and without repeats, and its
// last uses (zero: none).
type keyUsage struct {
	hours      []hourCounts
	days       []dayCounts
	lastUsed   time.Time
	lastAPIKey time.Time
	// hour and day are where a key's first hour and day are kept (hours
	// and days point into them until they outgrow them): most keys are
	// then one object for the collector to mark, not three. (A nil list
	// is one the file does not have, an empty one one it has empty.)
	hour [1]hourCounts
	day  [1]dayCounts
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

// compact turns the file's document into its form in memory. A bucket
// whose name is not a period is an error: nothing else writes one.
func (f *fileData) compact() (*usageData, error) {
	d := newUsageData()
	for id, hs := range f.Buckets {
		k := d.key(id)
		var err error
		if k.hours, err = periods(k.hour[:0], hs, 10, hourOf, func(h uint32, c Counts) hourCounts { return hourCounts{h, c} }); err != nil {
			return nil, fmt.Errorf("buckets of %q: %w", id, err)
		}
	}
	for id, ds := range f.Methods {
		k := d.key(id)
		var err error
		if k.days, err = periods(k.day[:0], ds, 8, dayOf, func(dd uint32, c MethodCounts) dayCounts { return dayCounts{dd, c.APIKey, c.Bearer} }); err != nil {
			return nil, fmt.Errorf("methods of %q: %w", id, err)
		}
	}
	for id, t := range f.LastUsed {
		d.key(id).lastUsed = t
	}
	for id, t := range f.LastAPIKey {
		d.key(id).lastAPIKey = t
	}
	return d, nil
}

func (s *FileStore) load() (*usageData, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return newUsageData(), nil
	}
	if err != nil {
		return nil, err
	}
	var f fileData
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("usage file %s: %w", s.Path, err)
	}
	d, err := f.compact()
	if err != nil {
		return nil, fmt.Errorf("usage file %s: %w", s.Path, err)
	}
	return d, nil
}

// Flush merges the deltas, drops buckets past Retention (once an hour)
// and rewrites the file when its pace allows (see FileStore).
func (s *FileStore) Flush(_ context.Context, ds []Delta, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		d, err := s.load()
		if err != nil {
			return err
		}
		s.data = d
	}
	if len(ds) == 0 {
		return nil
	}
	h, today := hourNum(now), dayNum(now)
	for i := range ds {
		x := &ds[i]
		k := s.data.key(x.ID)
		var c *hourCounts
		if k.hours == nil {
			k.hours = k.hour[:0]
		}
		k.hours, c = at(k.hours, h, hourOf)
		c.c.Add(x.Counts)
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
	if h != s.pruned {
		s.pruned = h
		s.data.prune(now)
	}
	s.dirty = true
	if !s.lastWrite.IsZero() && time.Since(s.lastWrite) < writeSpacing*s.writeCost {
		return nil
	}
	return s.write()
}

// Sync writes the counts that Flush has not written yet.
func (s *FileStore) Sync(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil || !s.dirty {
		return nil
	}
	return s.write()
}

// prune drops the buckets past Retention and the days past
// MethodRetention; a key with neither, nor a last use, goes. (Last uses
// are kept: they say when a key was last used, however long ago.)
func (d *usageData) prune(now time.Time) {
	oldest, oldestDay := hourNum(now.Add(-Retention)), dayNum(now.Add(-MethodRetention))
	for id, k := range d.keys {
		n := 0
		for n < len(k.hours) && k.hours[n].hour < oldest {
			n++
		}
		k.hours = drop(k.hours, n)
		n = 0
		for n < len(k.days) && k.days[n].day < oldestDay {
			n++
		}
		k.days = drop(k.days, n)
		if len(k.hours) == 0 && len(k.days) == 0 && k.lastUsed.IsZero() && k.lastAPIKey.IsZero() {
			delete(d.keys, id)
		}
	}
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

// write rewrites the file from s.data (s.mu held) and times it.
func (s *FileStore) write() error {
	start := time.Now()
	tmp, err := os.CreateTemp(filepath.Dir(s.Path), ".usage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := writeFileData(tmp, s.data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), s.Path); err != nil {
		return err
	}
	s.lastWrite = time.Now()
	s.writeCost, s.dirty = s.lastWrite.Sub(start), false
	return nil
}

// view calls fn with this store's counts when it has flushed (they may be
// ahead of the file), else with the file's as last written.
func (s *FileStore) view(fn func(*usageData)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data != nil {
		fn(s.data)
		return nil
	}
	d, err := s.load()
	if err != nil {
		return err
	}
	fn(d)
	return nil
}

// Read reads the counts (see view).
func (s *FileStore) Read(_ context.Context, ids []string, since time.Duration, now time.Time) (Counts, map[string]time.Time, error) {
	var c Counts
	last := map[string]time.Time{}
	err := s.view(func(d *usageData) {
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
	if err := s.view(func(d *usageData) { hs = d.series(ids, since, now) }); err != nil {
		return nil, err
	}
	return hs, nil
}

func (d *usageData) series(ids []string, since time.Duration, now time.Time) []Hour {
	hs := newSeries(since, now)
	for _, id := range ids {
		k := d.keys[id]
		if k == nil {
			continue
		}
		for i := range hs {
			if c, ok := find(k.hours, hourNum(hs[i].Start), hourOf); ok {
				hs[i].Add(c.c)
			}
		}
	}
	return hs
}

// LastUsed returns the last use of each of ids that has one.
func (s *FileStore) LastUsed(_ context.Context, ids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(ids))
	err := s.view(func(d *usageData) {
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
	err := s.view(func(d *usageData) {
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
