package keystore

import (
	"crypto/rand"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

func randomRecord(tb testing.TB, i int) Record {
	var h Hash
	_, _ = rand.Read(h[:])
	return Record{
		ID: fmt.Sprintf("key_%016x", i), Name: "team", Hash: h, Product: Extraction, Env: Live,
		Context: "6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5", CreatedAt: time.Unix(1700000000, 0).UTC(), Status: Active,
		Consumer: "con_0123456789abcdef", Plan: "pro",
	}
}

// TestIndexKeepsWhatTheRequestPathReads: a record put in the index comes
// back with every field the request path reads, for each product, env
// and status, and the index follows changes, deletions and sweeps.
func TestIndexKeepsWhatTheRequestPathReads(t *testing.T) {
	t.Parallel()
	exp := time.Date(2027, 1, 2, 3, 4, 5, 600, time.UTC)
	ov := &policy.Override{}
	cases := []struct {
		name string
		edit func(*Record)
	}{
		{"active extraction live", func(r *Record) {}},
		{"revoked registry test", func(r *Record) { r.Product, r.Env, r.Status, r.Context = Registry, Test, Revoked, "" }},
		{"rotated with expiry", func(r *Record) { r.Status, r.ExpiresAt = Rotated, exp }},
		{"override and no consumer", func(r *Record) { r.Override, r.Consumer, r.Plan, r.Name = ov, "", "", "" }},
		{"permissions and addresses", func(r *Record) {
			r.Product, r.Context = Registry, ""
			r.Permissions, r.AllowedCIDRs = []string{"registry:read"}, []string{"10.0.0.0/8", "2001:db8::/32"}
		}},
	}
	x := newIndex()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := randomRecord(t, i)
			tc.edit(&r)
			x.put(r, 1)
			got, ok := x.get(r.Hash)
			want := r
			want.CreatedAt = time.Time{} // admin-only
			if !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("get = %+v, %v\nwant %+v", got, ok, want)
			}
			if got.StateAt(time.Now()) != r.StateAt(time.Now()) {
				t.Errorf("state %s, want %s", got.StateAt(time.Now()), r.StateAt(time.Now()))
			}
		})
	}
	r := randomRecord(t, 99)
	x.put(r, 2)
	if n := x.sweep(2); n != len(cases) || x.len() != 1 {
		t.Errorf("sweep removed %d, left %d; want %d and 1", n, x.len(), len(cases))
	}
	x.update(r.Consumer, func(r Record) Record { r.Plan = "team"; return r })
	if got, _ := x.get(r.Hash); got.Plan != "team" {
		t.Errorf("update: plan %q", got.Plan)
	}
	x.del(r.Hash)
	if _, ok := x.get(r.Hash); ok || x.len() != 0 {
		t.Error("deleted record still there")
	}
}

// BenchmarkIndexLookup: a lookup allocates nothing.
func BenchmarkIndexLookup(b *testing.B) {
	x := newIndex()
	recs := make([]Record, 10_000)
	for i := range recs {
		recs[i] = randomRecord(b, i)
		recs[i].ExpiresAt = time.Now().Add(time.Hour)
		x.put(recs[i], 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := x.get(recs[i%len(recs)].Hash); !ok {
				b.Fatal("missing")
			}
			i++
		}
	})
}

var benchSizes = []int{10_000, 1_000_000}

// BenchmarkIndexChange: one change costs the same at 10k and at 1M keys.
func BenchmarkIndexChange(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			x := newIndex()
			recs := make([]Record, 1024)
			for i := range n {
				r := randomRecord(b, i)
				x.put(r, 0)
				if i < len(recs) {
					recs[i] = r
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := recs[i%len(recs)]
				r.Status = Revoked
				x.put(r, 0)
			}
		})
	}
}

// BenchmarkIndexLoad fills an index with 10k and 1M records and reports
// the heap it holds per key (bytes/key), which is the in-memory record's
// cost; RSS per key of a whole gateway is measured by bench/keyload.
func BenchmarkIndexLoad(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			recs := make([]Record, n)
			for i := range recs {
				recs[i] = randomRecord(b, i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var perKey float64
			for i := 0; i < b.N; i++ {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				x := newIndex()
				x.reserve(n)
				for _, r := range recs {
					r.ID = string([]byte(r.ID)) // as decoded: its own copy
					x.put(r, 0)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
				runtime.KeepAlive(x)
			}
			b.ReportMetric(perKey, "bytes/key")
		})
	}
}

// TestIndexSameSeesEveryField: a reload keeps an entry when its record
// is unchanged (index.same), so same must tell apart two records that
// differ in any field the request path reads, and must not tell apart
// two that differ only in what the index does not hold.
func TestIndexSameSeesEveryField(t *testing.T) {
	t.Parallel()
	base := randomRecord(t, 1)
	base.ExpiresAt = time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	base.Override = &policy.Override{Rate: 5, Per: time.Second}
	base.Permissions, base.AllowedCIDRs = []string{"extraction:read"}, []string{"10.0.0.0/8"}
	tests := []struct {
		name string
		edit func(*Record)
		same bool
	}{
		{"identical", func(*Record) {}, true},
		{"revoked, replaced by (admin only)", func(r *Record) {
			r.RevokedAt, r.ReplacedBy = time.Unix(2, 0), "key_00000000000000ff"
		}, true},
		{"created within the same second (the list's order holds seconds)", func(r *Record) {
			r.CreatedAt = r.CreatedAt.Add(999 * time.Millisecond)
		}, true},
		{"created another second", func(r *Record) { r.CreatedAt = r.CreatedAt.Add(time.Second) }, false},
		{"an equal override, another pointer", func(r *Record) { o := *r.Override; r.Override = &o }, true},
		{"id", func(r *Record) { r.ID = "key_00000000000000aa" }, false},
		{"name", func(r *Record) { r.Name = "other" }, false},
		{"product", func(r *Record) { r.Product = Registry }, false},
		{"env", func(r *Record) { r.Env = Test }, false},
		{"context", func(r *Record) { r.Context = "00000000-0000-4000-8000-000000000000" }, false},
		{"status", func(r *Record) { r.Status = Revoked }, false},
		{"expiry", func(r *Record) { r.ExpiresAt = r.ExpiresAt.Add(time.Nanosecond) }, false},
		{"no expiry", func(r *Record) { r.ExpiresAt = time.Time{} }, false},
		{"consumer", func(r *Record) { r.Consumer = "con_00000000000000aa" }, false},
		{"plan", func(r *Record) { r.Plan = "team" }, false},
		{"override", func(r *Record) { r.Override = &policy.Override{Rate: 6, Per: time.Second} }, false},
		{"no override", func(r *Record) { r.Override = nil }, false},
		{"permissions", func(r *Record) { r.Permissions = []string{"extraction:write"} }, false},
		{"addresses", func(r *Record) { r.AllowedCIDRs = nil }, false},
		{"nothing extra", func(r *Record) { r.Override, r.Permissions, r.AllowedCIDRs = nil, nil, nil }, false},
	}
	x := newIndex()
	x.put(base, 1)
	e, _ := x.entry(base.Hash)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := base
			tc.edit(&r)
			if got := x.same(e, r); got != tc.same {
				t.Errorf("same = %v, want %v", got, tc.same)
			}
		})
	}
}

// TestIndexFindsAConsumersEntries: a consumer's entries are found (for
// its key list and its pages, and re-resolved when it changes) by scanning only the
// shards that may hold one, and none is missed: consumers of 1, 7 and
// 600 keys, a key that moved from one consumer to another, and a
// consumer no key names.
func TestIndexFindsAConsumersEntries(t *testing.T) {
	t.Parallel()
	x := newIndex()
	sizes := map[string]int{"con_one": 1, "con_seven": 7, "con_many": 600, "": 2000}
	for c, n := range sizes {
		for i := range n {
			r := randomRecord(t, i)
			r.Consumer = c
			x.put(r, 0)
		}
	}
	moved := randomRecord(t, 1)
	moved.Consumer = "con_one"
	x.put(moved, 0)
	moved.Consumer = "con_seven"
	x.put(moved, 0)
	want := func(c string) map[Hash]bool {
		out := map[Hash]bool{}
		for i := range x.shards {
			for h, e := range x.shards[i].m {
				if x.strs.load()[e.consumer] == c {
					out[h] = true
				}
			}
		}
		return out
	}
	tests := []struct {
		consumer string
		n        int
		// scanned is at most 4 shards a key it ever had (or every one)
		scanned int
	}{
		{"con_one", 1, 8}, // its key, and the one that moved
		{"con_seven", 8, 32},
		{"con_many", 600, 256},
		{"con_nobody", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.consumer, func(t *testing.T) {
			got := map[Hash]bool{}
			for _, h := range x.consumerHashes(tt.consumer) {
				got[h] = true
			}
			if w := want(tt.consumer); len(got) != tt.n || !reflect.DeepEqual(got, w) {
				t.Errorf("consumerHashes: %d entries, want the %d the shards hold (%d)", len(got), len(w), tt.n)
			}
			paged := map[Hash]bool{}
			for _, e := range x.page(PageQuery{Consumer: tt.consumer, Now: time.Now(), Limit: 1000}) {
				paged[e.Hash] = true
			}
			if len(paged) != tt.n || !reflect.DeepEqual(paged, got) && tt.n > 0 {
				t.Errorf("page: %d entries, want %d", len(paged), tt.n)
			}
			updated := 0
			x.update(tt.consumer, func(r Record) Record {
				if r.Consumer != tt.consumer {
					t.Errorf("update of %s saw a key of %q", tt.consumer, r.Consumer)
				}
				updated++
				r.Name = "updated"
				return r
			})
			if updated != tt.n {
				t.Errorf("update changed %d entries, want %d", updated, tt.n)
			}
			scanned := 0
			if n, ok := x.strs.lookup(tt.consumer); ok {
				for range x.where.shards(n) {
					scanned++
				}
			}
			if scanned > tt.scanned {
				t.Errorf("%d shards scanned, want at most %d", scanned, tt.scanned)
			}
		})
	}
}

// FuzzShardSets: whatever numbers and shards are added, the shards a
// number yields are those of its group of every shard added for it, in
// order, each once.
func FuzzShardSets(f *testing.F) {
	f.Add([]byte{1, 0, 1, 255, 2, 7})
	f.Add([]byte{0, 3, 200, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m shardSets
		want := map[uint32]map[int]bool{}
		for i := 0; i+1 < len(b); i += 2 {
			n := uint32(b[i]) * 37 // spans several chunks
			m.add(n, b[i+1])
			if n == 0 {
				continue
			}
			if want[n] == nil {
				want[n] = map[int]bool{}
			}
			g := int(b[i+1]) / 4
			for s := 4 * g; s < 4*g+4; s++ {
				want[n][s] = true
			}
		}
		for n := range uint32(256 * 37) {
			last := -1
			got := map[int]bool{}
			for s := range m.shards(n) {
				if s <= last {
					t.Fatalf("number %d: shard %d after %d", n, s, last)
				}
				last = s
				got[s] = true
			}
			if len(got) != len(want[n]) || (len(got) > 0 && !reflect.DeepEqual(got, want[n])) {
				t.Fatalf("number %d: shards %v, want %v", n, got, want[n])
			}
		}
	})
}
