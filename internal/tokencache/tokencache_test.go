package tokencache_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/tokencache"
)

func TestCache(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		run  func(t *testing.T, c *tokencache.Cache[string])
	}{
		{"a token is found until its deadline, not at it", func(t *testing.T, c *tokencache.Cache[string]) {
			k := tokencache.KeyOf("tok-a")
			c.Add(k, "a", t0.Add(time.Minute))
			if v, ok := c.Get(k, t0.Add(time.Minute-time.Nanosecond)); !ok || v != "a" {
				t.Fatalf("before the deadline: %q %v", v, ok)
			}
			if _, ok := c.Get(k, t0.Add(time.Minute)); ok {
				t.Fatal("found at its deadline")
			}
			if c.Stats().Entries != 0 {
				t.Fatalf("%d entries after the deadline passed, want 0", c.Stats().Entries)
			}
		}},
		{"another token, even one byte apart, is not found", func(t *testing.T, c *tokencache.Cache[string]) {
			c.Add(tokencache.KeyOf("tok-a"), "a", t0.Add(time.Minute))
			for _, other := range []string{"tok-b", "tok-a ", "tok-", "Tok-a", ""} {
				if _, ok := c.Get(tokencache.KeyOf(other), t0); ok {
					t.Errorf("%q found", other)
				}
			}
		}},
		{"removed, it is gone", func(t *testing.T, c *tokencache.Cache[string]) {
			k := tokencache.KeyOf("tok-a")
			c.Add(k, "a", t0.Add(time.Minute))
			c.Remove(k)
			if _, ok := c.Get(k, t0); ok {
				t.Fatal("found after Remove")
			}
		}},
		{"it holds at most its size, the least recently used going first", func(t *testing.T, c *tokencache.Cache[string]) {
			for i := range 4 {
				c.Add(tokencache.KeyOf(fmt.Sprint("tok-", i)), fmt.Sprint(i), t0.Add(time.Hour))
			}
			c.Get(tokencache.KeyOf("tok-0"), t0) // used: tok-1 is now the oldest
			for i := 4; i < 6; i++ {
				c.Add(tokencache.KeyOf(fmt.Sprint("tok-", i)), fmt.Sprint(i), t0.Add(time.Hour))
			}
			if c.Stats().Entries != 4 {
				t.Fatalf("%d entries, want 4", c.Stats().Entries)
			}
			for i, want := range []bool{true, false, false, true, true, true} {
				if _, ok := c.Get(tokencache.KeyOf(fmt.Sprint("tok-", i)), t0); ok != want {
					t.Errorf("tok-%d found %v, want %v", i, ok, want)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, tokencache.New[string](4))
		})
	}
}
