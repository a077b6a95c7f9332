package keystore

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestIndexPageIsTheSortedList: a page from the index (what GET /v1/keys
// serves at a million keys without reading them) is exactly the page of
// a sort of every record: the keys that match each filter, by creation
// second then id (many keys share a second), after any position (a key's
// own, or one between keys), at any page size. Walking the pages lists
// every matching key once.
func TestIndexPageIsTheSortedList(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	rng := mrand.New(mrand.NewPCG(1, 2))
	x := newIndex()
	var all []Record
	for i := range 600 {
		var h Hash
		_, _ = rand.Read(h[:])
		r := Record{
			ID: fmt.Sprintf("key_%016x", rng.Uint64()), Hash: h,
			Product: []Product{Extraction, Registry}[rng.IntN(2)], Env: []Env{Live, Test}[rng.IntN(2)],
			Consumer: []string{"", "con_a", "con_b"}[rng.IntN(3)],
			// 600 keys over 40 seconds: about 15 share each second.
			CreatedAt: now.Add(-time.Duration(rng.IntN(40000)) * time.Millisecond),
			Status:    []Status{Active, Active, Revoked, Rotated}[rng.IntN(4)],
		}
		switch i % 5 {
		case 0:
			r.ExpiresAt = now.Add(-time.Minute) // expired
		case 1:
			r.ExpiresAt = now.Add(time.Minute)
		case 2:
			r.CreatedAt = time.Time{} // before 1970: lists first
		}
		x.put(r, 1)
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b Record) int { return PositionOf(a).Compare(PositionOf(b)) })
	filters := []PageQuery{
		{},
		{Consumer: "con_a"},
		{Consumer: "con_b", Status: Active},
		{Product: Registry, Env: Test},
		{Status: Expired},
		{Status: Revoked, Env: Live},
		{Consumer: "con_nobody"},
		{Product: "fax"},
	}
	for _, f := range filters {
		var want []Record
		for _, r := range all {
			if (f.Consumer == "" || r.Consumer == f.Consumer) && (f.Product == "" || r.Product == f.Product) &&
				(f.Env == "" || r.Env == f.Env) && (f.Status == "" || r.StateAt(now) == f.Status) {
				want = append(want, r)
			}
		}
		for _, limit := range []int{1, 7, 100, 1000} {
			t.Run(fmt.Sprintf("%+v/limit %d", f, limit), func(t *testing.T) {
				q := f
				q.Now, q.Limit = now, limit
				var got []string
				for pages := 0; ; pages++ {
					if pages > len(want)+1 {
						t.Fatalf("more than %d pages", pages)
					}
					page := x.page(q)
					if len(page) > limit {
						t.Fatalf("page of %d, limit %d", len(page), limit)
					}
					for _, e := range page {
						r, ok := x.get(e.Hash)
						if !ok || r.ID != e.ID {
							t.Fatalf("page entry %s: not the index's key under its hash", e.ID)
						}
						got = append(got, e.ID)
					}
					if len(page) < limit {
						break
					}
					q.After = &page[len(page)-1].Position
				}
				if w := ids(want); !slices.Equal(got, w) {
					t.Errorf("pages list %d keys %v\nwant %d %v", len(got), got, len(w), w)
				}
			})
		}
	}
	// A position between keys: the page starts at the first key after it.
	mid := PositionOf(all[300])
	mid.ID += "0"
	page := x.page(PageQuery{Now: now, After: &mid, Limit: 3})
	if got, want := pageIDs(page), ids(all[301:304]); !slices.Equal(got, want) {
		t.Errorf("after a position between keys: %v, want %v", got, want)
	}
}

// TestIndexEntryStaysEightyBytes: the creation second the key list pages
// by sits in what was the entry's padding, so a key in the index costs
// what it did (the memory per key of docs/explanation/memory-sizing.md, "Sizing").
func TestIndexEntryStaysEightyBytes(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 80 {
		t.Errorf("entry is %d bytes, want 80", n)
	}
}

func pageIDs(es []PageEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// BenchmarkIndexPage: a page of 100 keys out of 100,000 (GET /v1/keys on
// a Redis keystore): one pass over the index, allocating the page only.
func BenchmarkIndexPage(b *testing.B) {
	x := newIndex()
	x.reserve(100000)
	for i := range 100000 {
		r := randomRecord(b, i)
		r.CreatedAt = r.CreatedAt.Add(time.Duration(i%5000) * time.Second)
		x.put(r, 1)
	}
	after := &Position{Created: 1700002500, ID: "key_0000000000000000"}
	for _, bc := range []struct {
		name string
		q    PageQuery
	}{
		{"first page", PageQuery{Limit: 101}},
		{"a middle page, active keys", PageQuery{Status: Active, After: after, Limit: 101}},
		{"one consumer's", PageQuery{Consumer: "con_0123456789abcdef", Limit: 101}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			q := bc.q
			q.Now = time.Unix(1700000000, 0)
			for b.Loop() {
				if len(x.page(q)) != 101 {
					b.Fatal("short page")
				}
			}
		})
	}
}
