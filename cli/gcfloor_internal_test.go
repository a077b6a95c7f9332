package cli

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestGCFloorPercent: GOGC after a collection makes the next one's goal
// (live heap plus GOGC% of the pacer's roots: live heap, stacks and
// globals; at least the runtime's minimum heap, 4 MiB at 100 and scaled
// by GOGC) the floor, and never less than GOGC=100's: a replica whose
// keys hold most of the heap (a million keys) collects as it did
// without the floor.
func TestGCFloorPercent(t *testing.T) {
	const mib = 1 << 20
	g := newGCFloor(64*mib, 100)
	goal := func(live, roots uint64, p int) uint64 {
		return max(live+roots*uint64(p)/100, heapMinimum*uint64(p)/100)
	}
	for _, tc := range []struct {
		name        string
		live, roots uint64
		want        int
	}{
		{"no collection yet", 0, 0, 100},
		{"a tiny process: the minimum heap is the floor", 700 << 10, 1 * mib, 1600},
		{"one key (about 10 MiB live)", 10 * mib, 12 * mib, 450},
		{"rounded up", 10 * mib, 13 * mib, 416}, // 415.4
		{"half the floor live", 32 * mib, 33 * mib, 100},
		{"the floor live", 64 * mib, 66 * mib, 100},
		{"a million keys of a million consumers", 370 * mib, 375 * mib, 100},
	} {
		got := g.percent(tc.live, tc.roots)
		if got != tc.want {
			t.Errorf("%s: percent(%d KiB live, %d KiB roots) = %d, want %d", tc.name, tc.live>>10, tc.roots>>10, got, tc.want)
		}
		if tc.roots == 0 {
			continue
		}
		want := max(64*mib, tc.live+tc.roots)
		if g := goal(tc.live, tc.roots, got); g < want || g > want+want/50 {
			t.Errorf("%s: GOGC %d makes the goal %d KiB, want %d KiB (2%% over at most)", tc.name, got, g>>10, want>>10)
		}
	}
}

// TestGCFloorCollectsLess: the same garbage, with little live, costs
// a fraction of the collections with the floor that it costs without
// it, and a heap larger than the floor is left to GOGC=100.
func TestGCFloorCollectsLess(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	cycles := func() uint32 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var keep []byte
		for range 64 << 10 { // 256 MiB of 4 KiB objects, one live at a time
			keep = make([]byte, 4<<10)
		}
		runtime.KeepAlive(keep)
		runtime.ReadMemStats(&after)
		return after.NumGC - before.NumGC
	}
	without := cycles()
	ctx, stop := context.WithCancel(context.Background())
	done := newGCFloor(64<<20, 100).start(ctx)
	with := cycles()
	stop()
	<-done
	t.Logf("collections for 256 MiB of garbage: %d without the floor, %d with it", without, with)
	// Alone it is a few against a hundred; half leaves room for a floor
	// an earlier test of the package started, which may set GOGC once
	// more before its context ends.
	if with*2 > without {
		t.Errorf("%d collections with the floor, %d without: want half or fewer", with, without)
	}

	// Live above the floor: GOGC stays 100.
	big := newGCFloor(4<<20, 100)
	ballast := make([]byte, 8<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	runtime.GC()
	ctx, stop = context.WithCancel(context.Background())
	done = big.start(ctx)
	runtime.KeepAlive(ballast)
	stop()
	<-done
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC = %d with 8 MiB live and a 4 MiB floor, want 100", got)
	}
}
