package keystore

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/policy"
)

// TestConsumerSet: a replica's copy of the consumers answers what was
// last set, forgets what was removed, and a full pass replaces it whole;
// readers and writers may run at once (-race).
func TestConsumerSet(t *testing.T) {
	t.Parallel()
	cs := newConsumerSet(newStrtab())
	con := func(i int) Consumer {
		return Consumer{ID: fmt.Sprintf("con_%016x", i), Plan: fmt.Sprintf("plan %d", i%5), CreatedAt: time.Unix(int64(i), 0)}
	}
	ids := func() []string {
		var out []string
		cs.each(func(c *Consumer) { out = append(out, c.ID) })
		slices.Sort(out)
		return out
	}
	for i := range 300 {
		c := con(i)
		cs.set(c.ID, &c)
	}
	if got := len(ids()); got != 300 {
		t.Fatalf("%d consumers after 300 sets", got)
	}
	renamed := con(7)
	renamed.Plan = "pro"
	cs.set(renamed.ID, &renamed)
	cs.set(con(8).ID, nil)
	cases := []struct {
		id, want string // want "" for none
	}{
		{con(7).ID, "pro"},
		{con(8).ID, ""},
		{con(9).ID, "plan 4"},
		{"con_nobody", ""},
		{"", ""},
	}
	for _, c := range cases {
		got, ok := cs.get(c.id)
		switch {
		case c.want == "" && ok:
			t.Errorf("get(%q) = %+v, want none", c.id, got)
		case c.want != "" && (!ok || got.Plan != c.want):
			t.Errorf("get(%q) = %+v, want %q", c.id, got, c.want)
		}
	}
	if got := len(ids()); got != 299 {
		t.Errorf("%d consumers after a removal, want 299", got)
	}

	// A full pass: what it read, and nothing else.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = cs.get(con(3).ID)
					cs.each(func(*Consumer) {})
				}
			}
		}()
	}
	var pass []numberedConsumer
	for _, c := range []Consumer{con(1), con(2), con(3)} {
		pass = append(pass, cs.numbered(&c))
	}
	cs.replace(pass)
	c := con(4)
	cs.set(c.ID, &c)
	close(stop)
	wg.Wait()
	if got, want := ids(), []string{con(1).ID, con(2).ID, con(3).ID, con(4).ID}; !slices.Equal(got, want) {
		t.Errorf("after a full pass and a set: %v, want %v", got, want)
	}
}

// BenchmarkConsumerChange: a consumer change in a replica's copy costs
// the same with 10k and 1M consumers (a copy-on-write map copied them
// all for each change).
func BenchmarkConsumerChange(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("consumers=%d", n), func(b *testing.B) {
			cs := newConsumerSet(newStrtab())
			cons := make([]Consumer, n)
			pass := make([]numberedConsumer, n)
			for i := range cons {
				cons[i] = Consumer{ID: fmt.Sprintf("con_%016x", i), Name: "customer", Plan: "team"}
				pass[i] = cs.numbered(&cons[i])
			}
			cs.replace(pass)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := cons[i%1024]
				c.Name = "renamed"
				cs.set(c.ID, &c)
			}
		})
	}
}

// consumerChangeStore is a replica's keystore without Redis, with plans
// "team" (100/s) and "pro" (1000/s) over an env default of 10/s, and
// keys of consumer con_a among others.
func consumerChangeStore(tb testing.TB, keys, ofConsumer int) (*RedisStore, Hash) {
	tb.Helper()
	env := policy.Limit{Rate: 10, Per: time.Second, Burst: 10}
	res, err := policy.NewResolver(map[string]policy.Limit{"live": env, "test": env}, map[string]policy.Plan{
		"team": {Limit: policy.Limit{Rate: 100, Per: time.Second, Burst: 100}},
		"pro":  {Limit: policy.Limit{Rate: 1000, Per: time.Second, Burst: 1000}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	idx := newIndex()
	s := &RedisStore{idx: idx, cons: newConsumerSet(idx.strs), limits: limitResolver{res}}
	s.putConsumer("con_a", &Consumer{ID: "con_a", Name: "Acme", Plan: "team"})
	var first Hash
	for i := range keys {
		r := randomRecord(tb, i)
		r.Env, r.Plan, r.Consumer = Live, "", ""
		if i < ofConsumer {
			r.Consumer = "con_a"
		}
		s.put(r)
		if i == 0 {
			first = r.Hash
		}
	}
	return s, first
}

// TestConsumerChangeKeepsLimitsTrue: each change of a consumer leaves
// its keys with the limits it gives them: a new name or metadata (which
// re-resolve nothing) keep the plan's, a new plan or override gives
// theirs, and a deleted consumer leaves the env default.
func TestConsumerChangeKeepsLimitsTrue(t *testing.T) {
	t.Parallel()
	s, h := consumerChangeStore(t, 100, 10)
	steps := []struct {
		name   string
		change func(c *Consumer) *Consumer
		rate   float64
	}{
		{"renamed", func(c *Consumer) *Consumer { c.Name = "Acme Inc."; return c }, 100},
		{"metadata", func(c *Consumer) *Consumer { c.Metadata = map[string]string{"crm": "7"}; return c }, 100},
		{"contexts", func(c *Consumer) *Consumer { c.Contexts = []string{"6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"}; return c }, 100},
		{"plan pro", func(c *Consumer) *Consumer { c.Plan = "pro"; return c }, 1000},
		{"renamed on pro", func(c *Consumer) *Consumer { c.Name = "Acme"; return c }, 1000},
		{"override", func(c *Consumer) *Consumer { c.Override = &policy.Override{Rate: 5}; return c }, 5},
		{"override changed", func(c *Consumer) *Consumer { c.Override = &policy.Override{Rate: 7}; return c }, 7},
		{"override gone", func(c *Consumer) *Consumer { c.Override = nil; return c }, 1000},
		{"deleted", func(*Consumer) *Consumer { return nil }, 10},
	}
	for _, st := range steps {
		cur, _ := s.cons.get("con_a")
		s.putConsumer("con_a", st.change(&cur))
		r, ok := s.idx.get(h)
		if !ok || r.Limits == nil || r.Limits.Limit.Rate != st.rate {
			t.Fatalf("%s: the key's limit is %+v, want a rate of %v", st.name, r.Limits, st.rate)
		}
		if st.name == "deleted" {
			break
		}
	}
}

// BenchmarkConsumerChangeOfKeys: a change of a consumer's name costs the same
// with 10k and 1M keys; a change of its plan re-resolves its keys in the
// shards that may hold one: for a consumer of one key, 4 shards of 256,
// the same at 10k and 1M keys; for one of 1000 keys, every shard.
func BenchmarkConsumerChangeOfKeys(b *testing.B) {
	for _, n := range benchSizes {
		for _, of := range []int{1, 1000} {
			s, _ := consumerChangeStore(b, n, of)
			for _, kind := range []string{"name", "plan"} {
				b.Run(fmt.Sprintf("keys=%d/its-keys=%d/%s", n, of, kind), func(b *testing.B) {
					b.ReportAllocs()
					for i := 0; i < b.N; i++ {
						c, _ := s.cons.get("con_a")
						if kind == "name" {
							c.Name = fmt.Sprint("Acme ", i%2)
						} else {
							c.Plan = []string{"team", "pro"}[i%2]
						}
						s.putConsumer("con_a", &c)
					}
				})
			}
		}
	}
}

// TestConsumerSetHoldsWhatTheReplicaReads: the copy gives back, exactly,
// every field a replica reads of a consumer (its keys' limits, the list's
// order, the sign-in's metadata), nil and empty told apart, and holds
// none of the others.
func TestConsumerSetHoldsWhatTheReplicaReads(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 27, 16, 5, 7, 123456789, time.UTC)
	tests := []struct {
		name string
		c    Consumer
	}{
		{"bare", Consumer{ID: "con_0000000000000001", CreatedAt: created}},
		{"plan", Consumer{ID: "con_0000000000000002", Plan: "team", CreatedAt: created}},
		{"override", Consumer{ID: "con_0000000000000003", Plan: "pro", Override: &policy.Override{Rate: 5, Per: time.Second}, CreatedAt: created}},
		{"no permission at all", Consumer{ID: "con_0000000000000004", Permissions: []string{}, CreatedAt: created}},
		{"permissions and address rules", Consumer{ID: "con_0000000000000005", Permissions: []string{"extraction:read"}, AllowedCIDRs: []string{"10.0.0.0/8"}, CreatedAt: created}},
		{"metadata", Consumer{ID: "con_0000000000000006", Metadata: map[string]string{"crm": "7"}, CreatedAt: created}},
	}
	cs := newConsumerSet(newStrtab())
	for _, tt := range tests {
		full := tt.c
		full.Name, full.Contexts, full.UpdatedAt = "Acme", []string{"6f1c2d3e-4a5b-4c6d-8e7f-90a1b2c3d4e5"}, created.Add(time.Hour)
		cs.set(full.ID, &full)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := cs.get(tt.c.ID)
			if !ok {
				t.Fatal("not held")
			}
			if !got.CreatedAt.Equal(tt.c.CreatedAt) {
				t.Errorf("created %v, want %v", got.CreatedAt, tt.c.CreatedAt)
			}
			got.CreatedAt = tt.c.CreatedAt
			if !reflect.DeepEqual(got, tt.c) {
				t.Errorf("held %+v, want %+v", got, tt.c)
			}
			if (got.Permissions == nil) != (tt.c.Permissions == nil) {
				t.Errorf("permissions %#v, want %#v", got.Permissions, tt.c.Permissions)
			}
		})
	}
}

// BenchmarkConsumerSetLoad: the heap a replica's copy of n consumers
// holds, above the string table's copy of their ids (which their keys'
// index entries hold anyway), as a full pass fills it.
func BenchmarkConsumerSetLoad(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("consumers=%d", n), func(b *testing.B) {
			cons := make([]Consumer, n)
			for i := range cons {
				cons[i] = Consumer{ID: fmt.Sprintf("con_%016x", i), Name: "customer", CreatedAt: time.Unix(int64(i), 0)}
			}
			b.ReportAllocs()
			var per float64
			for i := 0; i < b.N; i++ {
				strs := newStrtab()
				for _, c := range cons {
					strs.number(c.ID)
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				cs := newConsumerSet(strs)
				pass := make([]numberedConsumer, n)
				for j := range cons {
					pass[j] = cs.numbered(&cons[j])
				}
				cs.replace(pass)
				pass = nil
				runtime.GC()
				runtime.ReadMemStats(&after)
				per = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
				runtime.KeepAlive(cs)
			}
			b.ReportMetric(per, "bytes/consumer")
		})
	}
}
