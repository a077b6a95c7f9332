package keystore

import (
	"fmt"
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
	cs := newConsumerSet()
	con := func(i int) Consumer {
		return Consumer{ID: fmt.Sprintf("con_%016x", i), Name: fmt.Sprintf("customer %d", i), CreatedAt: time.Unix(int64(i), 0)}
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
	renamed.Name = "renamed"
	cs.set(renamed.ID, &renamed)
	cs.set(con(8).ID, nil)
	cases := []struct {
		id, want string // want "" for none
	}{
		{con(7).ID, "renamed"},
		{con(8).ID, ""},
		{con(9).ID, "customer 9"},
		{"con_nobody", ""},
		{"", ""},
	}
	for _, c := range cases {
		got := cs.get(c.id)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("get(%q) = %+v, want none", c.id, got)
		case c.want != "" && (got == nil || got.Name != c.want):
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
					_ = cs.get(con(3).ID)
					cs.each(func(*Consumer) {})
				}
			}
		}()
	}
	cs.replace([]Consumer{con(1), con(2), con(3)})
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
			cs := newConsumerSet()
			cons := make([]Consumer, n)
			for i := range cons {
				cons[i] = Consumer{ID: fmt.Sprintf("con_%016x", i), Name: "customer", Plan: "team"}
			}
			cs.replace(cons)
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
	s := &RedisStore{idx: newIndex(), cons: newConsumerSet(), limits: limitResolver{res}}
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
		cur := *s.cons.get("con_a")
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
// with 10k and 1M keys; a change of its plan re-resolves its keys, a
// scan of the index.
func BenchmarkConsumerChangeOfKeys(b *testing.B) {
	for _, n := range benchSizes {
		s, _ := consumerChangeStore(b, n, 1000)
		for _, kind := range []string{"name", "plan"} {
			b.Run(fmt.Sprintf("keys=%d/%s", n, kind), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					c := *s.cons.get("con_a")
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
