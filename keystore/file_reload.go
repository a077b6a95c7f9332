package keystore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"iter"
	"os"
	"reflect"
	"slices"

	"github.com/keygate/keygate/policy"
)

// fileReload is one reload of the file store: it reads the file once into
// the live index, which keeps serving throughout, and holds no second
// index and no list of the file's records.
//
//   - While the file is read, each record is checked and compared with the
//     live entry of its hash. An unchanged record marks that entry as seen
//     by this reload (entry.gen) and costs nothing more. A new or changed
//     record is staged: compacted into the entry that will replace the
//     live one, in a list per shard. What a reload holds besides the index
//     is therefore the changed records, and two 8-byte numbers a record
//     (a hash of its id and the head of its key hash, to refuse a file
//     that repeats either).
//   - Nothing a lookup can see changes until the whole file has been read
//     and checked: a bad file leaves the index as it was (the marks it
//     left are those of a reload that never sweeps).
//   - apply then goes shard by shard. Under a read lock it finds the
//     entries no record saw; under one short write lock it removes those
//     and stores the staged entries, so that a lookup finds either the old
//     or the new entry of a key that both files hold, never neither. A
//     shard that loses many entries is rebuilt into a map of its new size
//     (a Go map never shrinks) and swapped in.
//
// The file store's reloads run one at a time (filewatch calls OnChange
// from one goroutine) and are the only writer of its index, so what
// apply reads under a shard's read lock still holds when it takes the
// write lock.
type fileReload struct {
	x   *index
	gen uint32
	n   int // records read
	// staged are the new and changed entries, by shard.
	staged [indexShards]stagedList
	// ids and heads are a 64-bit hash of each record's id and the first
	// 8 bytes of its key hash (SHA-256: uniform), sorted at the end to
	// find a repeat. Two values with one number send the file to
	// yaml.v3, which names both entries or reads it.
	ids, heads []uint64
	seed       maphash.Seed
	// last is what reuse looked up last (the entry of lastH, if lastOK),
	// so that stage, which comes next for the same record, need not look
	// it up again; lastSet says it is there. (The index does not change
	// while the file is read, so a lookup stays true.)
	lastH           Hash
	last            *entry
	lastOK, lastSet bool
}

type stagedEntry struct {
	h Hash
	e *entry
}

// stagedList is a list in chunks of at most stagedChunk entries, so
// that a reload staging a million entries never copies them and leaves
// at most one partly used chunk a shard.
type stagedList struct {
	chunks [][]stagedEntry
	n      int
}

const stagedChunk = 256

func (l *stagedList) add(p stagedEntry) {
	if k := len(l.chunks); k == 0 || len(l.chunks[k-1]) == cap(l.chunks[k-1]) {
		l.chunks = append(l.chunks, make([]stagedEntry, 0, min(stagedChunk, 8<<k)))
	}
	k := len(l.chunks) - 1
	l.chunks[k] = append(l.chunks[k], p)
	l.n++
}

func (l *stagedList) all() iter.Seq[stagedEntry] {
	return func(yield func(stagedEntry) bool) {
		for _, c := range l.chunks {
			for _, p := range c {
				if !yield(p) {
					return
				}
			}
		}
	}
}

// reloadStats says what a reload changed.
type reloadStats struct {
	added, changed, removed int
}

func newFileReload(x *index, gen uint32, hint int) *fileReload {
	return &fileReload{x: x, gen: gen, seed: maphash.MakeSeed(),
		ids: make([]uint64, 0, hint), heads: make([]uint64, 0, hint)}
}

// read reads and checks the keystore file f (path names it in errors)
// and stages its records. It returns the rest of the file (Keys nil).
func (rl *fileReload) read(f *os.File, path string) (fileDoc, error) {
	doc, err := scanDocReusing(f, rl.reuse, rl.add)
	if err == nil && rl.repeats() {
		err = errNotCanonical
	}
	if errors.Is(err, errNotCanonical) {
		// A layout the fast reader does not know, or a repeated id or
		// hash: yaml.v3 reads the file whole, and names both entries.
		rl.reset()
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fileDoc{}, fmt.Errorf("keystore file: %w", err)
		}
		data, err := io.ReadAll(f)
		if err != nil {
			return fileDoc{}, fmt.Errorf("keystore file: %w", err)
		}
		doc, err := parseDoc(data)
		if err != nil {
			return fileDoc{}, fmt.Errorf("%s: %w", path, err)
		}
		for _, r := range doc.Keys {
			rl.n++
			rl.stage(r)
		}
		doc.Keys = nil
		return doc, nil
	}
	if err != nil {
		return fileDoc{}, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := validateDoc(fileDoc{Consumers: doc.Consumers, AdminTokens: doc.AdminTokens}); err != nil {
		return fileDoc{}, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}

// reuse gives the reader the id and name strings of the live entry of
// h, so that an unchanged record allocates nothing.
func (rl *fileReload) reuse(h Hash) (id, name string, ok bool) {
	e, ok := rl.x.entry(h)
	rl.lastH, rl.last, rl.lastOK, rl.lastSet = h, e, ok, true
	if !ok {
		return "", "", false
	}
	return e.id, e.name, true
}

// add is scanDoc's callback: it checks r and stages it.
func (rl *fileReload) add(r Record) error {
	if err := ValidateRecord(r); err != nil {
		return fmt.Errorf("keystore file: keys[%d]: %w", rl.n, err)
	}
	rl.ids = append(rl.ids, maphash.String(rl.seed, r.ID))
	rl.heads = append(rl.heads, binary.LittleEndian.Uint64(r.Hash[:8]))
	rl.n++
	rl.stage(r)
	return nil
}

// stage marks the live entry of r's hash as seen if it is what r would
// make, and otherwise stages r's entry.
func (rl *fileReload) stage(r Record) {
	e, ok := rl.last, rl.lastOK
	if !rl.lastSet || r.Hash != rl.lastH {
		e, ok = rl.x.entry(r.Hash)
	}
	rl.last, rl.lastOK, rl.lastSet = nil, false, false
	if ok && rl.x.same(e, r) {
		e.gen.Store(rl.gen)
		return
	}
	rl.staged[r.Hash[0]].add(stagedEntry{r.Hash, rl.x.compact(r, rl.gen)})
}

// repeats reports whether two records had one id or one hash (or two
// values one number).
func (rl *fileReload) repeats() bool {
	for _, v := range [][]uint64{rl.ids, rl.heads} {
		slices.Sort(v)
		for i := 1; i < len(v); i++ {
			if v[i] == v[i-1] {
				return true
			}
		}
	}
	return false
}

// reset forgets what was read.
func (rl *fileReload) reset() {
	rl.n = 0
	rl.ids, rl.heads = rl.ids[:0], rl.heads[:0]
	for i := range rl.staged {
		rl.staged[i] = stagedList{}
	}
}

// apply makes the index hold what was read: see fileReload. resolve,
// when not nil, gives the limits of a staged record and of a seen one
// whose consumer is in recons (its consumer changed).
func (rl *fileReload) apply(resolve func(Record) *policy.Effective, recons map[uint32]bool) reloadStats {
	var st reloadStats
	x, gen := rl.x, rl.gen
	var gone []Hash
	var redo []stagedEntry
	for i := range x.shards {
		s := &x.shards[i]
		staged := rl.staged[i]
		rl.staged[i] = stagedList{}
		if resolve != nil {
			for p := range staged.all() {
				p.e.limits = resolve(x.record(p.h, p.e)) // not yet published: written in place
			}
		}
		gone, redo = gone[:0], redo[:0]
		s.mu.RLock()
		size := len(s.m)
		for h, e := range s.m {
			switch {
			case e.gen.Load() != gen:
				gone = append(gone, h)
			case recons[e.consumer]:
				redo = append(redo, stagedEntry{h, e})
			}
		}
		replaced := 0
		for p := range staged.all() {
			if _, ok := s.m[p.h]; ok {
				replaced++
			}
		}
		s.mu.RUnlock()
		for j, p := range redo {
			c := x.compact(x.record(p.h, p.e), gen)
			c.limits = resolve(x.record(p.h, c))
			redo[j].e = c
		}
		st.added += staged.n - replaced
		st.changed += replaced + len(redo)
		st.removed += len(gone) - replaced
		if len(gone)-replaced > 64 && 4*(len(gone)-replaced) > size {
			// Rebuilt at its new size, then swapped in.
			m := make(map[Hash]*entry, size-len(gone)+staged.n)
			s.mu.RLock()
			for h, e := range s.m {
				if e.gen.Load() == gen {
					m[h] = e
				}
			}
			s.mu.RUnlock()
			for _, p := range redo {
				m[p.h] = p.e
			}
			for p := range staged.all() {
				m[p.h] = p.e
			}
			s.mu.Lock()
			s.m = m
			s.mu.Unlock()
			continue
		}
		if len(gone)+staged.n+len(redo) == 0 {
			continue
		}
		s.mu.Lock()
		for _, h := range gone {
			delete(s.m, h)
		}
		for _, p := range redo {
			s.m[p.h] = p.e
		}
		for p := range staged.all() {
			s.m[p.h] = p.e
		}
		s.mu.Unlock()
	}
	return st
}

// changedConsumers returns the numbers, in x's string table, of the
// consumers that old and cur hold differently (added, removed or
// changed) and that some key names.
func (x *index) changedConsumers(old, cur map[string]Consumer) map[uint32]bool {
	out := make(map[uint32]bool)
	mark := func(id string) {
		if n, ok := x.strs.lookup(id); ok && id != "" {
			out[n] = true
		}
	}
	for id, c := range cur {
		if o, ok := old[id]; !ok || !reflect.DeepEqual(o, c) {
			mark(id)
		}
	}
	for id := range old {
		if _, ok := cur[id]; !ok {
			mark(id)
		}
	}
	return out
}
