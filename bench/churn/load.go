package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
	"github.com/keygate/keygate/bench/internal/openloop"
)

const boundary = "----keygatechurn7MA4YWxkTrZu0gW"

const contentType = "multipart/form-data; boundary=" + boundary

// multipartBody is the load's /sync body: contextId, id, then a file of
// size bytes of PDF-looking filler (no CR or LF, so no boundary in it).
func multipartBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString("--" + boundary + "\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + benchContext + "\r\n")
	b.WriteString("--" + boundary + "\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\n9b1f6a52-8c3e-4d7a-a1b2-0c9d8e7f6a5b\r\n")
	b.WriteString("--" + boundary + "\r\nContent-Disposition: form-data; name=\"files\"; filename=\"doc.pdf\"\r\nContent-Type: application/pdf\r\n\r\n")
	p := []byte("%PDF-1.7 benchmark payload 0123456789abcdefghijklmnopqrstuvwxyz ")
	for i := range size {
		b.WriteByte(p[i%len(p)])
	}
	b.WriteString("\r\n--" + boundary + "--\r\n")
	return b.Bytes()
}

// --- process accounting ------------------------------------------------

// selfTicks is this process's own CPU time (the open-loop client), in
// clock ticks, without its children.
func selfTicks() int64 {
	f := benchproc.StatFields(os.Getpid())
	if len(f) <= 12 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// cpuMeter reads the CPU time of named processes over an interval.
type cpuMeter struct {
	names  []string
	pids   []int // 0: this process alone
	before []int64
	start  time.Time
	// The machine's CPU ticks and the hypervisor's steal at begin.
	total0, steal0 int64
}

func newCPUMeter() *cpuMeter { return &cpuMeter{} }

func (m *cpuMeter) add(name string, pid int) {
	m.names, m.pids = append(m.names, name), append(m.pids, pid)
}

func (m *cpuMeter) read() []int64 {
	out := make([]int64, len(m.pids))
	for i, p := range m.pids {
		if p == 0 {
			out[i] = selfTicks()
		} else {
			out[i] = benchproc.CPUTicks(p)
		}
	}
	return out
}

func (m *cpuMeter) begin() {
	m.total0, m.steal0 = benchproc.MachineTicks()
	m.before, m.start = m.read(), time.Now()
}

// end returns each process's CPU time since begin, in µs, by name, the
// wall time, and the share of the machine's CPU time the hypervisor stole
// meanwhile (a slow spell of the host, which no process here caused).
func (m *cpuMeter) end() (map[string]int64, time.Duration, float64) {
	after := m.read()
	out := map[string]int64{}
	for i, n := range m.names {
		out[n] = (after[i] - m.before[i]) * benchproc.TickMicros
	}
	total1, steal1 := benchproc.MachineTicks()
	return out, time.Since(m.start), benchproc.StealShare(m.total0, m.steal0, total1, steal1)
}

// --- closed loop (wrk) ----------------------------------------------------

type closedResult struct {
	rps    float64
	total  int64
	errors int64
	cpu    map[string]int64 // µs by process
	wall   time.Duration
	steal  float64 // the hypervisor's share of the machine's CPU time
}

var (
	reRPS    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	reTotal  = regexp.MustCompile(`(\d+) requests in`)
	reNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	reSock   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

func (b *bench) wrkScript() (string, error) {
	bp := filepath.Join(b.dir, "body.bin")
	if err := os.WriteFile(bp, multipartBody(b.o.Size), 0o600); err != nil {
		return "", err
	}
	lua := fmt.Sprintf(`-- keygate bench-churn: multipart POST /sync, contextId first, with x-api-key.
local f = assert(io.open(%q, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = %q
wrk.headers["X-Api-Key"] = %q
`, bp, contentType, b.key)
	sp := filepath.Join(b.dir, "sync.lua")
	return sp, os.WriteFile(sp, []byte(lua), 0o600)
}

// loaded is the replicas the load goes to.
func (b *bench) loaded() []*replica {
	if b.o.Load == "both" {
		return b.replicas
	}
	return b.replicas[:1]
}

// closedLoop runs wrk, 2 threads and 32 connections in all, against the
// loaded replicas (one wrk -t1 -c16 each when both are), and reads the
// CPU time of every process around it.
func (b *bench) closedLoop(ctx context.Context, m *cpuMeter) (closedResult, error) {
	wrk := benchproc.LookPath("wrk")
	if wrk == "" {
		return closedResult{}, fmt.Errorf("wrk is not installed: run make deps")
	}
	script, err := b.wrkScript()
	if err != nil {
		return closedResult{}, err
	}
	secs := max(1, int(b.o.Duration/time.Second))
	targets := b.loaded()
	threads, conns := 2/len(targets), 32/len(targets)
	outs, errs := make([][]byte, len(targets)), make([]error, len(targets))
	var wg sync.WaitGroup
	m.begin()
	for i, rp := range targets {
		cmd := exec.CommandContext(ctx, wrk, fmt.Sprintf("-t%d", threads), fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%ds", secs), "-s", script, "http://"+rp.addr+"/sync")
		wg.Go(func() { outs[i], errs[i] = cmd.CombinedOutput() })
	}
	wg.Wait()
	var r closedResult
	r.cpu, r.wall, r.steal = m.end()
	for i, out := range outs {
		if errs[i] != nil {
			return closedResult{}, fmt.Errorf("wrk: %w\n%s", errs[i], out)
		}
		if m := reRPS.FindSubmatch(out); m != nil {
			rps, _ := strconv.ParseFloat(string(m[1]), 64)
			r.rps += rps
		}
		if m := reTotal.FindSubmatch(out); m != nil {
			n, _ := strconv.ParseInt(string(m[1]), 10, 64)
			r.total += n
		}
		if m := reNon2xx.FindSubmatch(out); m != nil {
			n, _ := strconv.ParseInt(string(m[1]), 10, 64)
			r.errors += n
		}
		if m := reSock.FindSubmatch(out); m != nil {
			for _, s := range m[1:] {
				n, _ := strconv.ParseInt(string(s), 10, 64)
				r.errors += n
			}
		}
	}
	return r, nil
}

// --- open loop ------------------------------------------------------------

type openResult struct {
	p50, p99, max time.Duration
	sent, errors  int
	cpu           map[string]int64
	wall          time.Duration
	steal         float64
}

// openLoop sends requests to the loaded replicas (in turn) at a fixed
// rate for the bench duration, each from its intended send time whatever
// the previous ones are doing, and measures latency from that intended
// time (so queueing in keygate, or in this client, counts).
func (b *bench) openLoop(ctx context.Context, m *cpuMeter) (openResult, error) {
	body := multipartBody(b.o.Size)
	tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var urls []string
	for _, rp := range b.loaded() {
		urls = append(urls, "http://"+rp.addr+"/sync")
	}
	rps := b.o.OpenRate
	n := int(b.o.Duration.Seconds() * float64(rps))
	m.begin()
	lat, failed := openloop.Run(ctx, client, n, time.Second/time.Duration(rps), func(ctx context.Context, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, urls[i%len(urls)], bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-Api-Key", b.key)
		return req
	})
	var r openResult
	r.cpu, r.wall, r.steal = m.end()
	r.sent, r.errors = n, failed
	if n > 0 {
		r.p50, r.p99, r.max = lat[n/2], lat[min(n-1, n*99/100)], lat[n-1]
	}
	return r, nil
}
