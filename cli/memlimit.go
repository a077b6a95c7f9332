package cli

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// The Go collector lets the heap grow to twice what is live (GOGC=100)
// and knows nothing of the container's memory limit, so a replica whose
// keys fill a good part of its limit is killed by the kernel when the
// heap outgrows the limit between two collections: with a million keys
// of a million consumers a replica holds about 370 MiB once loaded and
// peaked at 590 MiB while loading, over the Helm chart's 512 MiB, where
// it was killed every time (README, Memory limit). With the limit
// (GOMEMLIMIT), the collector runs earlier as the heap nears it instead.
// keygate sets it from the limit of its cgroup (v1 or v2, through
// automemlimit), times AUTOMEMLIMIT (0.9 unless set), once at start.
// GOMEMLIMIT, when set, is the operator's and wins; AUTOMEMLIMIT=off
// leaves the limit unset.

// memLimitEnv is the ratio's variable, as automemlimit reads it.
const memLimitEnv = "AUTOMEMLIMIT"

// setMemoryLimit sets the Go runtime's memory limit as above and logs
// it. Only an AUTOMEMLIMIT that is neither "off" nor a ratio in (0, 1]
// is an error; a cgroup that cannot be read leaves the limit unset.
func setMemoryLimit(log *zap.Logger) error {
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
	set, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(memlimit.Limit(limit)))
	if err != nil {
		log.Warn("memory limit not set", zap.Error(err))
		return nil
	}
	log.Info("memory limit", zap.String("from", "cgroup"), zap.Uint64("cgroup_bytes", limit),
		zap.Float64("ratio", ratio), zap.Int64("GOMEMLIMIT", set))
	return nil
}
