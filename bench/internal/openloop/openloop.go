// Package openloop is the open-loop load generator the bench programs
// (bench/peers, bench/churn) share: requests at a constant arrival rate,
// each timed from when it was due to be sent.
package openloop

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// workers bounds the requests in flight: far more than the rates the
// benches ask for need at the latencies they see.
const workers = 512

// Run sends n requests, the i-th due at start + i×interval (start a moment
// from now, so that the workers are up), whatever the earlier ones are
// doing, and measures each one's latency from the time it was due, so that
// queueing in the target, or in this generator, counts. newRequest makes
// the i-th request; a request fails on an error or a status other than
// 200. Run returns the latencies, sorted, and how many failed.
func Run(ctx context.Context, client *http.Client, n int, interval time.Duration, newRequest func(ctx context.Context, i int) *http.Request) (sorted []time.Duration, failed int) {
	base := time.Now().Add(50 * time.Millisecond)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * interval) }
	lat := make([]time.Duration, n)
	bad := make([]bool, n)
	work := make(chan int, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				resp, err := client.Do(newRequest(ctx, i))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				lat[i] = time.Since(at(i))
				bad[i] = err != nil || resp.StatusCode != http.StatusOK
			}
		}()
	}
	for i := 0; i < n; {
		now := time.Now()
		for i < n && !at(i).After(now) {
			work <- i
			i++
		}
		time.Sleep(100 * time.Microsecond)
	}
	close(work)
	wg.Wait()
	for _, f := range bad {
		if f {
			failed++
		}
	}
	slices.Sort(lat)
	return lat, failed
}
