package keystore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// reloadRecord is the i-th record of the reload tests' files.
func reloadRecord(i int) Record {
	return Record{ID: fmt.Sprintf("key_%016x", i), Name: fmt.Sprintf("app %d", i%7), Hash: HashKey(fmt.Sprintf("reload-key-%d", i)),
		Product: Extraction, Env: Live, Context: fmt.Sprintf("6f1c2d3e-4a5b-4c6d-8e7f-%012d", i%5),
		CreatedAt: time.Unix(1700000000, 0).UTC(), Status: Active}
}

// reloadFiles are two versions of one keystore: b drops every 10th key of
// a (i%10 == 1), revokes and renames every 10th (i%10 == 2), and adds n/5
// keys of its own. present are the keys both hold.
type reloadFiles struct {
	n           int
	a, b        []Record
	present     []Hash
	removed     []Hash
	changed     map[Hash]Record // b's version
	added       []Hash
	aLen, bLen  int
	changedName string
}

func newReloadFiles(n int) reloadFiles {
	f := reloadFiles{n: n, changed: map[Hash]Record{}, changedName: "renamed on revoke"}
	for i := range n {
		r := reloadRecord(i)
		f.a = append(f.a, r)
		switch i % 10 {
		case 1:
			f.removed = append(f.removed, r.Hash)
			continue
		case 2:
			r.Status, r.RevokedAt, r.Name = Revoked, time.Unix(1700000100, 0).UTC(), f.changedName
			f.changed[r.Hash] = r
		}
		f.present = append(f.present, r.Hash)
		f.b = append(f.b, r)
	}
	for i := n; i < n+n/5; i++ {
		r := reloadRecord(i)
		f.added = append(f.added, r.Hash)
		f.b = append(f.b, r)
	}
	f.aLen, f.bLen = len(f.a), len(f.b)
	return f
}

func marshalRecords(t testing.TB, recs []Record) []byte {
	data, err := MarshalFile(recs)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFileReloadUnderLookups: while readers look up, without pause, every
// key that two versions of a keystore file both hold, the file goes back
// and forth between them (renamed over, as FileAdmin writes it), and
// between them comes a file whose last record is bad. No lookup of a key
// both versions hold ever misses, a changed key reads as one version or
// the other, a bad file changes nothing, and after each reload the store
// holds exactly that version: removed keys gone, changed keys with their
// new fields, added keys found.
func TestFileReloadUnderLookups(t *testing.T) {
	t.Parallel()
	f := newReloadFiles(4000)
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, marshalRecords(t, f.a), 0o600); err != nil {
		t.Fatal(err)
	}
	s, reloads := openStore(t, FileConfig{Path: path})
	<-reloads

	var stop atomic.Bool
	var lookups, misses, torn atomic.Int64
	var firstMiss atomic.Value
	var wg sync.WaitGroup
	for g := range max(2, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; !stop.Load(); i++ {
				h := f.present[i%len(f.present)]
				r, ok, _ := s.Lookup(context.Background(), h)
				lookups.Add(1)
				if !ok {
					misses.Add(1)
					firstMiss.CompareAndSwap(nil, h.String())
					continue
				}
				if c, changed := f.changed[h]; changed {
					// One version or the other, never a mix.
					if !(r.Status == Active && r.Name != c.Name || r.Status == Revoked && r.Name == c.Name) {
						torn.Add(1)
					}
				}
			}
		}()
	}

	// bad is b with a last record that does not validate: all of b's
	// changes come before it.
	bad := append(append([]Record(nil), f.b...), reloadRecord(f.n+f.n))
	bad[len(bad)-1].Product = "nonsense"
	steps := []struct {
		name    string
		recs    []Record
		wantErr bool
		want    string // "a" or "b": what the store holds after
	}{
		{"a to b", f.b, false, "b"},
		{"b to a", f.a, false, "a"},
		{"a to a bad b", bad, true, "a"},
		{"a to b after the bad file", f.b, false, "b"},
		{"b to a again", f.a, false, "a"},
		{"a to b again", f.b, false, "b"},
	}
	for _, st := range steps {
		if err := writeFileAtomic(path, marshalRecords(t, st.recs)); err != nil {
			t.Fatal(err)
		}
		wantLen := f.aLen
		if st.want == "b" {
			wantLen = f.bLen
		}
		awaitReload(t, reloads, st.name, func(r reload) bool {
			return (r.err != nil) == st.wantErr && r.keys == wantLen
		})
		if s.Len() != wantLen {
			t.Fatalf("%s: %d keys, want %d", st.name, s.Len(), wantLen)
		}
		for _, h := range f.removed {
			if _, ok, _ := s.Lookup(context.Background(), h); ok != (st.want == "a") {
				t.Fatalf("%s: removed key %s found: %v", st.name, h, ok)
			}
		}
		for _, h := range f.added {
			if _, ok, _ := s.Lookup(context.Background(), h); ok != (st.want == "b") {
				t.Fatalf("%s: added key %s found: %v", st.name, h, ok)
			}
		}
		for h, c := range f.changed {
			r, _, _ := s.Lookup(context.Background(), h)
			if got := r.Status == Revoked && r.Name == c.Name; got != (st.want == "b") {
				t.Fatalf("%s: changed key %s reads status %s, name %q", st.name, h, r.Status, r.Name)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if misses.Load() > 0 || torn.Load() > 0 {
		t.Errorf("%d of %d lookups of keys both files hold missed (first %v); %d read a mix of two versions", misses.Load(), lookups.Load(), firstMiss.Load(), torn.Load())
	}
	t.Logf("%d lookups during %d reloads", lookups.Load(), len(steps))
}

// TestFileReloadReplacesEverything: a file with none of the keys the
// store serves (every key replaced) leaves exactly the new keys, found
// with their fields.
func TestFileReloadReplacesEverything(t *testing.T) {
	t.Parallel()
	const n = 5000
	var a, b []Record
	for i := range n {
		a = append(a, reloadRecord(i))
		b = append(b, reloadRecord(n+i))
	}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, marshalRecords(t, a), 0o600); err != nil {
		t.Fatal(err)
	}
	s, reloads := openStore(t, FileConfig{Path: path})
	<-reloads
	if err := writeFileAtomic(path, marshalRecords(t, b)); err != nil {
		t.Fatal(err)
	}
	awaitReload(t, reloads, "the reload of the new keys", func(r reload) bool { return r.err == nil && r.keys == n })
	if s.Len() != n {
		t.Fatalf("%d keys, want %d", s.Len(), n)
	}
	for i := range n {
		if _, ok, _ := s.Lookup(context.Background(), a[i].Hash); ok {
			t.Fatalf("old key %d still found", i)
		}
		if r, ok, _ := s.Lookup(context.Background(), b[i].Hash); !ok || r.ID != b[i].ID || r.Name != b[i].Name || r.Context != b[i].Context {
			t.Fatalf("new key %d: %+v, %v", i, r, ok)
		}
	}
}

// awaitReload is nextReload with room for a reload of thousands of keys
// under -race on a busy machine (these tests are not about how soon).
func awaitReload(t *testing.T, reloads <-chan reload, what string, ok func(reload) bool) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case r := <-reloads:
			if ok(r) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s within a minute", what)
		}
	}
}

// benchFile writes a keystore file of n keys and returns its path.
func benchFile(b *testing.B, n int) string {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = reloadRecord(i)
	}
	path := filepath.Join(b.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, marshalRecords(b, recs), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkFileLoad loads a keystore file of 100k keys as OpenFile does
// and reports the heap the store holds per key.
func BenchmarkFileLoad(b *testing.B) {
	const n = 100_000
	path := benchFile(b, n)
	s := &FileStore{path: path, log: zap.NewNop()}
	b.ReportAllocs()
	b.ResetTimer()
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x, _, err := s.read()
		if err != nil || x.len() != n {
			b.Fatal(err, x.len())
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(x)
	}
	b.ReportMetric(perKey, "bytes/key")
}

// BenchmarkFileReload reloads a keystore file of 100k keys into a store
// that serves it: the file unchanged (touched), with 1% of its keys
// revoked and 1% replaced, and with every key replaced. Each reload goes
// back and forth between two files, so that every one changes what the
// store holds. allocated-bytes/key is what one reload allocates (garbage
// included) per key of the file.
func BenchmarkFileReload(b *testing.B) {
	const n = 100_000
	a := make([]Record, n)
	for i := range a {
		a[i] = reloadRecord(i)
	}
	for _, tc := range []struct {
		name string
		edit func(i int, r *Record)
	}{
		{"unchanged", func(int, *Record) {}},
		{"1%_revoked_1%_replaced", func(i int, r *Record) {
			switch i % 100 {
			case 1:
				r.Status, r.RevokedAt = Revoked, time.Unix(1700000100, 0).UTC()
			case 2:
				*r = reloadRecord(n + i)
			}
		}},
		{"all_replaced", func(i int, r *Record) { *r = reloadRecord(n + i) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			other := make([]Record, n)
			for i := range other {
				other[i] = a[i]
				tc.edit(i, &other[i])
			}
			dir := b.TempDir()
			paths := [2]string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}
			for i, recs := range [][]Record{a, other} {
				if err := os.WriteFile(paths[i], marshalRecords(b, recs), 0o600); err != nil {
					b.Fatal(err)
				}
			}
			s := &FileStore{path: paths[0], log: zap.NewNop()}
			if err := s.reload(); err != nil {
				b.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				i++
				s.path = paths[i%2]
				if err := s.update(true); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(i)/n, "allocated-bytes/key")
			if s.Len() != n {
				b.Fatalf("%d keys, want %d", s.Len(), n)
			}
		})
	}
}
