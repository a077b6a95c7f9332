package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
	"github.com/keygate/keygate/bench/internal/openloop"
	"github.com/keygate/keygate/keystore"
)

const boundary = "----keygatebench7MA4YWxkTrZu0gW"

// sizes are the file sizes of the closed- and open-loop runs.
func sizes(o Options) []int {
	if o.Sizes != "" {
		var out []int
		for _, f := range strings.Split(o.Sizes, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n >= 0 {
				out = append(out, n)
			}
		}
		return out
	}
	if o.Smoke {
		return []int{256, 2 << 10}
	}
	// The documents this service receives are 100 KiB to tens of MiB.
	return []int{256, 100 << 10, 1 << 20, 20 << 20}
}

// rate is the open-loop arrival rate for a size: above 100 KiB, the bytes
// a second of 1000 requests of 100 KiB (97 a second of 1 MiB, 4 of 20
// MiB), which every target can take; at most 200 in a smoke run.
func rate(o Options, size int) int {
	r := 1000
	switch {
	case size <= 1<<10:
		r = 4000
	case size > 100<<10:
		r = max(1, int(1000*int64(100<<10)/int64(size)))
	}
	if o.Smoke {
		r = min(r, 200)
	}
	return r
}

// wrkTimeout is wrk's --timeout for a body of size bytes: wrk's default
// (2 s) below 1 MiB, and a second more for each MiB, so that an upload
// of 20 MiB behind 31 others on the same target is not counted as a
// socket error.
func wrkTimeout(size int) time.Duration {
	return 2*time.Second + time.Duration(size>>20)*time.Second
}

func sizeName(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// multipartParts returns what comes before and after a file of size bytes
// in the bench's /sync body: contextId, id and files, with contextId first
// or after the file.
func multipartParts(contextFirst bool) (head, tail string) {
	ctxPart := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + benchContext + "\r\n"
	idPart := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\n9b1f6a52-8c3e-4d7a-a1b2-0c9d8e7f6a5b\r\n"
	fileHead := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"files\"; filename=\"doc.pdf\"\r\nContent-Type: application/pdf\r\n\r\n"
	end := "\r\n--" + boundary + "--\r\n"
	if contextFirst {
		return ctxPart + idPart + fileHead, end
	}
	return idPart + fileHead, "\r\n" + ctxPart + "--" + boundary + "--\r\n"
}

const contentType = "multipart/form-data; boundary=" + boundary

// multipartBody is the whole bench body with a file of size bytes.
func multipartBody(size int, contextFirst bool) ([]byte, string) {
	head, tail := multipartParts(contextFirst)
	var b bytes.Buffer
	b.WriteString(head)
	b.Write(filler(size))
	b.WriteString(tail)
	return b.Bytes(), contentType
}

// filler is PDF-looking bytes with no CR or LF, so no boundary can appear.
func filler(n int) []byte {
	p := []byte("%PDF-1.7 benchmark payload 0123456789abcdefghijklmnopqrstuvwxyz ")
	out := make([]byte, n)
	for i := range out {
		out[i] = p[i%len(p)]
	}
	return out
}

// --- process accounting ------------------------------------------------

// memKiB sums a /proc/pid/status field (VmHWM, VmRSS) over the tree.
func memKiB(pid int, field string) int64 { return procKiB(pid, "status", field) }

// pssKiB sums the proportional set size (/proc/pid/smaps_rollup) over
// the tree: a page that several of its processes share (nginx's workers
// share what the master loaded before it forked them, and its shared
// memory zones) counts once in all, where VmRSS counts it in each.
func pssKiB(pid int) int64 { return procKiB(pid, "smaps_rollup", "Pss") }

// procKiB sums a "Field: N kB" line of /proc/PID/file over the tree.
func procKiB(pid int, file, field string) int64 {
	var sum int64
	for _, p := range benchproc.Tree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", p, file))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				sum += v
			}
		}
	}
	return sum
}

// resetHWM resets the peak RSS of the tree (Linux clear_refs 5).
func resetHWM(pid int) {
	for _, p := range benchproc.Tree(pid) {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p), []byte("5"), 0)
	}
}

// --- closed loop (wrk) ----------------------------------------------------

type closedResult struct {
	rps, cpuPerReq float64
	// redisCPUPerReq is the target's redis-server's CPU per request (0
	// without one).
	redisCPUPerReq float64
	errors         int64
	// What wrk counted: requests answered, answers other than 2xx and
	// 3xx, and socket errors (connect, read, write, timeout).
	requests, non2xx, sockErrors int64
	// steal is the share of the machine's CPU time the hypervisor gave
	// to other guests during the run (/proc/stat): a rep run slow for
	// that says so.
	steal float64
	// peakRSS is the target's process tree's peak RSS during the run,
	// KiB (its redis-server's not included).
	peakRSS int64
}

var (
	reRPS    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reTotal  = regexp.MustCompile(`(\d+) requests in`)
	reNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSock   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

func (b *bench) wrkScript(size int) (string, error) {
	return b.wrkScriptWith(size, "X-Api-Key", b.key, "")
}

// wrkScriptWith is wrkScript with the credential header name: value, in a
// file named with suffix.
func (b *bench) wrkScriptWith(size int, name, value, suffix string) (string, error) {
	body, ctype := multipartBody(size, true)
	bp := filepath.Join(b.dir, fmt.Sprintf("body-%d.bin", size))
	if err := os.WriteFile(bp, body, 0o600); err != nil {
		return "", err
	}
	lua := fmt.Sprintf(`-- keygate bench-peers: multipart POST /sync, contextId first, with %s.
local f = assert(io.open(%q, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = %q
wrk.headers[%q] = %q
`, strings.ToLower(name), bp, ctype, name, value)
	sp := filepath.Join(b.dir, fmt.Sprintf("sync-%d%s.lua", size, suffix))
	return sp, os.WriteFile(sp, []byte(lua), 0o600)
}

// warmUp runs wrk for Warmup against t, once after each start, and
// throws its figures away.
func (b *bench) warmUp(ctx context.Context, t *target, size int) error {
	if t.warm || b.o.Warmup <= 0 {
		return nil
	}
	t.warm = true
	_, err := b.wrkFor(ctx, t, size, b.o.Warmup)
	if errors.Is(err, errNoWrk) && b.o.Smoke {
		return nil
	}
	return err
}

// closedLoop runs wrk -t2 -c32 against t and reads t's CPU time around it.
func (b *bench) closedLoop(ctx context.Context, t *target, size int) (closedResult, error) {
	return b.wrkFor(ctx, t, size, b.o.Duration)
}

// wrkFor runs wrk -t2 -c32 against t for d and reads t's CPU time around it.
func (b *bench) wrkFor(ctx context.Context, t *target, size int, d time.Duration) (closedResult, error) {
	if benchproc.LookPath("wrk") == "" {
		return closedResult{}, errNoWrk
	}
	script, err := b.wrkScriptFor(ctx, t, size)
	if err != nil {
		return closedResult{}, err
	}
	r, err := b.wrkRun(ctx, t, script, size, d)
	r.errors = r.non2xx + r.sockErrors
	return r, err
}

// wrkRun runs wrk -t2 -c32 with script, whose body is size bytes, against
// t for d and reads t's CPU time around it. It leaves errors to its
// caller: what counts as one depends on what the script sends.
func (b *bench) wrkRun(ctx context.Context, t *target, script string, size int, d time.Duration) (closedResult, error) {
	return b.wrkRunConns(ctx, t, script, size, d, 2, 32)
}

// wrkRunConns is wrkRun with wrk's threads and connections.
func (b *bench) wrkRunConns(ctx context.Context, t *target, script string, size int, d time.Duration, threads, conns int) (closedResult, error) {
	wrk := benchproc.LookPath("wrk")
	if wrk == "" {
		return closedResult{}, errNoWrk
	}
	secs := max(1, int(d/time.Second))
	cmd := exec.CommandContext(ctx, wrk, fmt.Sprintf("-t%d", threads), fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%ds", secs), "--timeout", fmt.Sprintf("%ds", int(wrkTimeout(size)/time.Second)), "-s", script, b.scheme()+t.addr+"/sync")
	resetHWM(t.root.Process.Pid)
	before, redisBefore := benchproc.CPUTicks(t.root.Process.Pid), t.redisTicks()
	total0, steal0 := benchproc.MachineTicks()
	out, err := cmd.CombinedOutput()
	total1, steal1 := benchproc.MachineTicks()
	after, redisAfter := benchproc.CPUTicks(t.root.Process.Pid), t.redisTicks()
	if err != nil {
		return closedResult{}, fmt.Errorf("wrk %s: %w\n%s", t.name, err, out)
	}
	r := closedResult{steal: benchproc.StealShare(total0, steal0, total1, steal1), peakRSS: memKiB(t.root.Process.Pid, "VmHWM")}
	if m := reRPS.FindSubmatch(out); m != nil {
		r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	var total int64
	if m := reTotal.FindSubmatch(out); m != nil {
		total, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	r.requests = total
	if m := reNon2xx.FindSubmatch(out); m != nil {
		r.non2xx, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if m := reSock.FindSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(string(s), 10, 64)
			r.sockErrors += n
		}
	}
	if total > 0 {
		r.cpuPerReq = float64((after-before)*benchproc.TickMicros) / float64(total)
		r.redisCPUPerReq = float64((redisAfter-redisBefore)*benchproc.TickMicros) / float64(total)
	}
	return r, nil
}

// redisTicks is the CPU time of t's redis-server, 0 without one.
func (t *target) redisTicks() int64 {
	if t.redis == nil {
		return 0
	}
	return benchproc.CPUTicks(t.redis.Process.Pid)
}

var errNoWrk = fmt.Errorf("wrk is not installed: run make deps")

// --- open loop ------------------------------------------------------------

type openResult struct {
	p50, p99 time.Duration
	sent     int
	errors   int
}

// openLoop sends requests at a fixed rate for the bench duration, each
// from its intended send time, whatever the previous ones are doing, and
// measures latency from that intended time (so queueing in the target, or
// in the generator, counts).
func (b *bench) openLoop(ctx context.Context, t *target, size, rps int) (openResult, error) {
	body, ctype := multipartBody(size, true)
	tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute, DisableCompression: true, TLSClientConfig: b.clientTLS(), MaxConnsPerHost: b.openConnCap()}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := b.scheme() + t.addr + "/sync"
	b.warmOpen(ctx, client, url, body, ctype)
	n := int(b.o.Duration.Seconds() * float64(rps))
	if _, _, err := b.credential(ctx, t, 0); err != nil {
		return openResult{}, err
	}
	lat, failed := openloop.Run(ctx, client, n, time.Second/time.Duration(rps), func(ctx context.Context, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		h, v, _ := b.credential(ctx, t, i) // fetched above, for the run
		req.Header.Set(h, v)
		return req
	})
	r := openResult{sent: n, errors: failed}
	if n > 0 {
		r.p50, r.p99 = lat[n/2], lat[min(n-1, n*99/100)]
	}
	return r, nil
}

// --- large uploads ----------------------------------------------------------

type largeResult struct {
	elapsed   time.Duration
	peakRSS   int64 // KiB
	spoolPeak int64 // largest spool file seen, bytes (one per upload)
	errors    int
}

type fillReader struct{ left int64 }

var fillChunk = filler(64 << 10)

func (f *fillReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	n := copy(p, fillChunk[:min(int64(len(fillChunk)), f.left)])
	f.left -= int64(n)
	return n, nil
}

// large sends LargeN uploads of LargeMiB at once and measures the time
// until all are answered, the target's peak RSS, and keygate's spool.
func (b *bench) large(ctx context.Context, t *target, contextFirst bool) (largeResult, error) {
	size := int64(b.o.LargeMiB) << 20
	head, tail := multipartParts(contextFirst)
	pid := t.root.Process.Pid
	resetHWM(pid)
	stop := make(chan struct{})
	var peakRSS, spoolPeak int64
	var mon sync.WaitGroup
	mon.Add(1)
	go func() {
		defer mon.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			peakRSS = max(peakRSS, memKiB(pid, "VmRSS"))
			if t.spool != "" {
				spoolPeak = max(spoolPeak, largestOpenFile(pid, t.spool))
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	credName, credValue, err := b.credential(ctx, t, 0)
	if err != nil {
		close(stop)
		mon.Wait()
		return largeResult{}, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: b.o.LargeN, WriteBufferSize: 64 << 10}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var r largeResult
	start := time.Now()
	for range b.o.LargeN {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := io.MultiReader(strings.NewReader(head), &fillReader{left: size}, strings.NewReader(tail))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+t.addr+"/sync", body)
			req.ContentLength = int64(len(head)) + size + int64(len(tail))
			req.Header.Set("Content-Type", contentType)
			req.Header.Set(credName, credValue)
			resp, err := client.Do(req)
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if !ok {
				mu.Lock()
				r.errors++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	close(stop)
	mon.Wait()
	r.peakRSS = max(peakRSS, memKiB(pid, "VmHWM"))
	r.spoolPeak = spoolPeak
	return r, nil
}

// largestOpenFile is the size of the largest file under dir that pid
// holds open (spool files are unlinked as soon as they are created, so
// only the process's descriptors still reach them).
func largestOpenFile(pid int, dir string) int64 {
	var m int64
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(fdDir)
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil || !strings.HasPrefix(link, dir+"/") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(fdDir, e.Name())); err == nil && fi.Mode().IsRegular() {
			m = max(m, fi.Size())
		}
	}
	return m
}

// refusalLoop loads t, a target that checks keys, with a made-up key of
// the right shape and the smallest body of the run, for the bench
// duration: what a flood of guessed keys from one address costs it.
// Every answer must be a refusal; an admitted request or a socket error
// counts as an error. It returns the status of one more request with the
// key, sent right after the flood: keygate's failure limit
// (auth.failure_limit, on by default) answers an address past its
// burst of failures 429 before it looks at any key. It then waits until
// t admits the bench key again, so that the loads after it measure t
// and not that limit.
func (b *bench) refusalLoop(ctx context.Context, t *target) (closedResult, int, error) {
	if benchproc.LookPath("wrk") == "" {
		return closedResult{}, 0, errNoWrk
	}
	madeUp, err := keystore.Generate(keystore.Live)
	if err != nil {
		return closedResult{}, 0, err
	}
	script, err := b.wrkScriptWith(sizes(b.o)[0], "X-Api-Key", madeUp, "-refused")
	if err != nil {
		return closedResult{}, 0, err
	}
	r, err := b.wrkRun(ctx, t, script, sizes(b.o)[0], b.o.Duration)
	if err != nil {
		return r, 0, err
	}
	r.errors = r.sockErrors + r.requests - r.non2xx
	client := b.client()
	defer client.CloseIdleConnections()
	status, _, err := b.postSync(ctx, client, t.addr, madeUp)
	if err != nil {
		return r, 0, fmt.Errorf("%s: a request right after the refusals: %w", t.name, err)
	}
	return r, status, b.waitReady(t.name, t.addr)
}
