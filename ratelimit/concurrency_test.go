package ratelimit_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/keygate/keygate/ratelimit"
)

func TestConcurrencyCap(t *testing.T) {
	t.Parallel()
	c := ratelimit.NewConcurrency(2)
	for i := 0; i < 2; i++ {
		if !c.Acquire("a") {
			t.Fatalf("request %d of a was refused under the cap of 2", i+1)
		}
	}
	if c.Acquire("a") {
		t.Fatal("a third request of a was admitted past the cap of 2")
	}
	if !c.Acquire("b") {
		t.Fatal("b is refused because of a")
	}
	if got := c.InFlight("a"); got != 2 {
		t.Errorf("InFlight(a) = %d, want 2 (a refusal must not count)", got)
	}
	c.Release("a")
	if !c.Acquire("a") {
		t.Fatal("a is refused after one of its requests ended")
	}
	c.Release("a")
	c.Release("a")
	c.Release("b")
	if n := c.Len(); n != 0 {
		t.Errorf("Len = %d after every request ended; entries must be removed at zero", n)
	}
}

func TestConcurrencyOffAndNil(t *testing.T) {
	t.Parallel()
	for _, max := range []int{0, -1} {
		c := ratelimit.NewConcurrency(max)
		if c != nil {
			t.Fatalf("NewConcurrency(%d) = %v, want nil (no cap)", max, c)
		}
		for i := 0; i < 100; i++ {
			if !c.Acquire("a") {
				t.Fatal("a nil cap refused")
			}
		}
		c.Release("a")
		if c.Len() != 0 || c.InFlight("a") != 0 {
			t.Error("a nil cap counts")
		}
	}
}

// TestConcurrencyParallel: many goroutines of many ids never exceed the
// cap, and every entry is gone at the end (run with -race).
func TestConcurrencyParallel(t *testing.T) {
	t.Parallel()
	const max, ids, workers = 3, 20, 16
	c := ratelimit.NewConcurrency(max)
	var mu sync.Mutex
	inFlight := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				id := "key" + strconv.Itoa((i*7+w)%ids)
				if !c.Acquire(id) {
					continue
				}
				mu.Lock()
				inFlight[id]++
				if inFlight[id] > max {
					t.Errorf("%s has %d in flight, cap %d", id, inFlight[id], max)
				}
				mu.Unlock()
				mu.Lock()
				inFlight[id]--
				mu.Unlock()
				c.Release(id)
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n != 0 {
		t.Errorf("Len = %d at the end", n)
	}
}

func BenchmarkConcurrency(b *testing.B) {
	c := ratelimit.NewConcurrency(16)
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = "key_" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			id := ids[i%len(ids)]
			i++
			if c.Acquire(id) {
				c.Release(id)
			}
		}
	})
}
