package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// The Go collector lets the heap grow to twice what is live (GOGC=100)
// and knows nothing of the container's memory limit, so a replica whose
// keys fill a good part of its limit is killed by the kernel when the
// heap outgrows the limit between two collections: with a million keys
// of a million consumers a replica holds about 370 MiB once loaded and
// peaked at 590 MiB while loading, over the Helm chart's 512 MiB, where
// it was killed every time (docs/explanation/memory-sizing.md, "The memory limit"). With the limit
// (GOMEMLIMIT), the collector runs earlier as the heap nears it instead.
// keygate sets it from the limit of its cgroup (v1 or v2, through
// automemlimit), times AUTOMEMLIMIT (0.9 unless set), at start, and
// follows the cgroup's limit when it changes (a pod resized in place).
// GOMEMLIMIT, when set, is the operator's and wins; AUTOMEMLIMIT=off
// leaves the limit unset.

// memLimitRefresh is how often keygate reads its cgroup's limit again.
var memLimitRefresh = 15 * time.Second

// memLimitEnv is the ratio's variable, named as automemlimit names it.
const memLimitEnv = "AUTOMEMLIMIT"

// setMemoryLimit sets the Go runtime's memory limit as above and logs
// it; when it came from the cgroup, it follows the cgroup's limit until
// ctx ends. Only an AUTOMEMLIMIT that is neither "off" nor a ratio in
// (0, 1] is an error; a cgroup that cannot be read leaves the limit
// unset.
func setMemoryLimit(ctx context.Context, log *zap.Logger) error {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		// The runtime read it at start; automemlimit would leave it too.
		log.Info("memory limit", zap.String("from", "GOMEMLIMIT"), zap.String("GOMEMLIMIT", v))
		return nil
	}
	ratio := 0.9
	switch v := os.Getenv(memLimitEnv); v {
	case "":
	case "off":
		log.Info("memory limit off", zap.String("from", memLimitEnv+"=off"))
		return nil
	default:
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(r) || r <= 0 || r > 1 {
			return fmt.Errorf("%s=%q: want a share of the container's memory limit in (0, 1], such as 0.9, or off", memLimitEnv, v)
		}
		ratio = r
	}
	limit, err := memlimit.FromCgroup()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit):
		log.Debug("memory limit: none (the cgroup has none)")
		return nil
	case err != nil:
		log.Warn("memory limit not set: the cgroup's could not be read", zap.Error(err))
		return nil
	}
	set := goMemLimit(limit, ratio)
	debug.SetMemoryLimit(set)
	log.Info("memory limit", zap.String("from", "cgroup"), zap.Uint64("cgroup_bytes", limit),
		zap.Float64("ratio", ratio), zap.Int64("GOMEMLIMIT", set))
	go followMemoryLimit(ctx, log, ratio, limit)
	return nil
}

// goMemLimit is the Go runtime's limit for a cgroup limit: ratio of it
// (as automemlimit's ApplyRatio), or none when the cgroup has none.
func goMemLimit(cgroup uint64, ratio float64) int64 {
	if cgroup == 0 {
		return math.MaxInt64
	}
	return int64(float64(cgroup) * ratio)
}

// followMemoryLimit reads the cgroup's limit every memLimitRefresh and
// sets the runtime's again when it changed. A read that fails keeps the
// limit as it is (logged once until a read succeeds again).
func followMemoryLimit(ctx context.Context, log *zap.Logger, ratio float64, last uint64) {
	t := time.NewTicker(memLimitRefresh)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		limit, err := memlimit.FromCgroup()
		switch {
		case errors.Is(err, memlimit.ErrNoLimit):
			limit = 0
		case err != nil:
			if !failing {
				log.Warn("memory limit kept: the cgroup's could not be read", zap.Error(err))
			}
			failing = true
			continue
		}
		failing = false
		if limit == last {
			continue
		}
		set := goMemLimit(limit, ratio)
		debug.SetMemoryLimit(set)
		log.Info("memory limit changed", zap.String("from", "cgroup"), zap.Uint64("cgroup_bytes", limit),
			zap.Uint64("previous_cgroup_bytes", last), zap.Float64("ratio", ratio), zap.Int64("GOMEMLIMIT", set))
		last = limit
	}
}
