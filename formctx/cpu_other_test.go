//go:build !unix

package formctx

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }
