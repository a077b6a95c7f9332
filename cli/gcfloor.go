package cli

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The Go collector starts a cycle when the heap has grown by GOGC% (100)
// of what the last one left live, and not before the heap reaches 4 MiB
// (its minimum heap). A replica with few keys has little live (about
// 10 MiB with one key), so under load it collects every 10 MiB or so
// allocated, several times a second, and each cycle's fixed costs
// (stacks, roots, the pacer's turns, the write barrier) fall on the
// requests: more than the project's 3% rule allows at 256 B, side by side
// against a build without this floor (make bench-peers with
// -keygate-base-rev and -only-side-by-side, and the instruction counts in
// bench/results; docs/explanation/memory-sizing.md). So keygate raises
// the minimum heap to a floor (64 MiB): after each cycle it sets
// GOGC so that the next one starts when the heap reaches the floor, or
// at GOGC=100's doubling when that is later. A replica whose keys hold
// more than half the floor is left at GOGC=100 exactly as before, and
// the memory limit (memlimit.go) still bounds the heap in a container:
// the collector runs sooner as the heap nears it, whatever GOGC says.
//
// GOGC, when set, is the operator's and wins; KEYGATE_GC_FLOOR_MIB sets
// the floor in MiB (0 turns it off). Either one set to "" is unset.

// gcFloorEnv is the floor's variable, in MiB.
const gcFloorEnv = "KEYGATE_GC_FLOOR_MIB"

// defaultGCFloorMiB is the floor when gcFloorEnv is unset.
const defaultGCFloorMiB = 64

// maxGCFloorMiB bounds gcFloorEnv (1 TiB): a larger value is a typo.
const maxGCFloorMiB = 1 << 20

// gcFloorOnce starts the process's floor once: the GC percent is the
// process's, whatever runs keygate in it.
var gcFloorOnce sync.Once

// setGCFloor starts the floor as above, until ctx is done, and logs what
// it did. Only a
// gcFloorEnv that is not a whole number of MiB in [0, maxGCFloorMiB] is
// an error.
func setGCFloor(ctx context.Context, log *zap.Logger) error {
	if v := os.Getenv("GOGC"); v != "" { // the runtime reads "" as unset too
		log.Info("gc heap floor off", zap.String("from", "GOGC"), zap.String("GOGC", v))
		return nil
	}
	mib := defaultGCFloorMiB
	if v := os.Getenv(gcFloorEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxGCFloorMiB {
			return fmt.Errorf("%s=%q: want the collector's heap floor in whole MiB, from 0 (off) to %d, such as %d", gcFloorEnv, v, maxGCFloorMiB, defaultGCFloorMiB)
		}
		mib = n
	}
	if mib == 0 {
		log.Info("gc heap floor off", zap.String("from", gcFloorEnv+"=0"))
		return nil
	}
	gcFloorOnce.Do(func() { newGCFloor(uint64(mib)<<20, 100).start(ctx) })
	log.Info("gc heap floor", zap.Int("floor_mib", mib))
	return nil
}

// gcFloor sets GOGC after every collection from what it left live. The
// runtime's goal for the next one is the heap found live plus GOGC% of
// that heap, the stacks and the globals (the pacer's roots since Go
// 1.18), and at least the minimum heap, which is also scaled by GOGC:
// 4 MiB at 100. So GOGC is the floor's growth over what is live as a
// share of the roots, but no more than makes the minimum heap the floor
// (a process with little heap has a few MiB of globals and stacks, and
// GOGC 6432 for a 64 MiB floor over 0.7 MiB live made its goal 257 MiB
// through the minimum).
type gcFloor struct {
	floor  uint64 // the heap's goal, at least (bytes)
	base   int    // GOGC when the floor is below base% of what is live
	last   int    // GOGC as last set (0: not yet)
	sample []metrics.Sample
}

func newGCFloor(floor uint64, base int) *gcFloor {
	return &gcFloor{floor: floor, base: base, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
	}}
}

// heapMinimum is the runtime's minimum heap at GOGC=100 (its
// defaultHeapMinimum; the heapminimum512kib experiment makes it smaller,
// and the floor then a little lower for a process with a tiny heap).
const heapMinimum = 4 << 20

// percent is GOGC after a collection that found live bytes of heap live
// and roots bytes of heap, stacks and globals: the floor's growth over
// live as a share of roots, rounded up, at most what makes the minimum
// heap the floor, and at least base.
func (g *gcFloor) percent(live, roots uint64) int {
	if roots == 0 || live >= g.floor {
		return g.base
	}
	p := ((g.floor-live)*100 + roots - 1) / roots
	p = min(p, g.floor*100/heapMinimum)
	return int(max(p, uint64(g.base)))
}

// afterGC sets GOGC for the collection to come.
func (g *gcFloor) afterGC() {
	metrics.Read(g.sample)
	var roots uint64
	for _, s := range g.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return // not this runtime's metric: GOGC is left alone
		}
		roots += s.Value.Uint64()
	}
	if p := g.percent(g.sample[0].Value.Uint64(), roots); p != g.last {
		debug.SetGCPercent(p)
		g.last = p
	}
}

// gcFloorRefresh is how often the floor looks for a finished collection
// and sets GOGC from what it left live. The live heap of a replica moves
// with its keys, slowly; a second late costs one cycle at the old GOGC.
const gcFloorRefresh = time.Second

// start sets GOGC now, then after each collection, looked for every
// gcFloorRefresh, until ctx is done; done is closed once it has stopped.
// It uses only runtime/metrics and debug.SetGCPercent, and the goal's
// formula from the Go GC guide: no hook into the collector.
func (g *gcFloor) start(ctx context.Context) (done <-chan struct{}) {
	g.afterGC()
	cycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(cycles)
	last := cycles[0].Value
	d := make(chan struct{})
	go func() {
		defer close(d)
		t := time.NewTicker(gcFloorRefresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			metrics.Read(cycles)
			if v := cycles[0].Value; v.Kind() != metrics.KindUint64 || last.Kind() != metrics.KindUint64 || v.Uint64() != last.Uint64() {
				last = v
				g.afterGC()
			}
		}
	}()
	return d
}
