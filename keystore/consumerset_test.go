package keystore

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
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
