package ratelimit

import (
	"slices"
	"testing"
)

// TestGroupsSendAnIDsLimitOnce: calls of one id with the same limit and
// cells wanted go to the script as one group, its keys and limit once
// and the number of calls last; a call of that id with another limit or
// another want (an override changed, a lease) starts a group of its own,
// and the script's replies, seven values per call in order, still line
// up with the calls.
func TestGroupsSendAnIDsLimitOnce(t *testing.T) {
	t.Parallel()
	mk := func(id string, burst int, want int64) *call {
		c := &call{args: []any{burst, 1e6, int64(0), int64(0), want, 1}}
		c.keys = []string{"rl:{" + id + "}", "q:{" + id + "}"}
		return c
	}
	cases := []struct {
		name  string
		batch []*call
		keys  []string
		args  []any
	}{
		{"one call", []*call{mk("a", 10, 1)},
			[]string{"rl:{a}", "q:{a}"},
			[]any{10, 1e6, int64(0), int64(0), int64(1), 1}},
		{"three calls of one id", []*call{mk("a", 10, 1), mk("a", 10, 1), mk("a", 10, 1)},
			[]string{"rl:{a}", "q:{a}"},
			[]any{10, 1e6, int64(0), int64(0), int64(1), 3}},
		{"another limit and a lease of the same id, then another id", []*call{mk("a", 10, 1), mk("a", 10, 1), mk("a", 20, 1), mk("a", 20, 5), mk("b", 10, 1), mk("b", 10, 1)},
			[]string{"rl:{a}", "q:{a}", "rl:{a}", "q:{a}", "rl:{a}", "q:{a}", "rl:{b}", "q:{b}"},
			[]any{
				10, 1e6, int64(0), int64(0), int64(1), 2,
				20, 1e6, int64(0), int64(0), int64(1), 1,
				20, 1e6, int64(0), int64(0), int64(5), 1,
				10, 1e6, int64(0), int64(0), int64(1), 2,
			}},
		{"an id again after another (the batcher sorts, but groups never merge what is apart)", []*call{mk("a", 10, 1), mk("b", 10, 1), mk("a", 10, 1)},
			[]string{"rl:{a}", "q:{a}", "rl:{b}", "q:{b}", "rl:{a}", "q:{a}"},
			[]any{
				10, 1e6, int64(0), int64(0), int64(1), 1,
				10, 1e6, int64(0), int64(0), int64(1), 1,
				10, 1e6, int64(0), int64(0), int64(1), 1,
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keys, args := groups(c.batch)
			if !slices.Equal(keys, c.keys) {
				t.Errorf("keys %q, want %q", keys, c.keys)
			}
			if !slices.Equal(args, c.args) {
				t.Errorf("args %v, want %v", args, c.args)
			}
			calls := 0
			for i := nArgs - 1; i < len(args); i += nArgs {
				calls += args[i].(int)
			}
			if calls != len(c.batch) {
				t.Errorf("groups count %d calls, the batch has %d", calls, len(c.batch))
			}
		})
	}
}
