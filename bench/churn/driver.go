package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// driverConfig is the churn driver's: it issues and revokes keys through
// the replicas' admin APIs (key i through replica i mod 2's) and probes
// every replica with each key.
type driverConfig struct {
	Admins  []string // admin API base URLs, http://host:port
	Probes  []string // the replicas' /sync URLs
	Token   string
	Context string
	// Rate is changes a second: issues and revocations half each.
	Rate int
	// Lifetime is how long a key lives, from both replicas accepting it,
	// before it is revoked.
	Lifetime time.Duration
	// ProbeEvery is the interval between probes of a revoked key.
	ProbeEvery time.Duration
}

// giveUp is how long a replica may keep accepting a revoked key (or
// refusing a new one) before the driver counts it as a failure.
const giveUp = 10 * time.Second

// driverReport is what the driver prints, as JSON, when it stops.
type driverReport struct {
	Seconds float64 `json:"seconds"`
	// RevokeSeconds is the time from the first revocation to the end.
	RevokeSeconds float64 `json:"revoke_seconds"`
	Issued        int     `json:"issued"`
	Revoked       int     `json:"revoked"`
	// AdminErrors are admin calls that failed; AdminError is the first.
	AdminErrors int    `json:"admin_errors"`
	AdminError  string `json:"admin_error,omitempty"`
	// NewKeyRefused counts first probes of a key just issued that a
	// replica answered 401 (it must look the key up in Redis instead);
	// NeverAccepted those still refused after giveUp.
	NewKeyRefused int `json:"new_key_refused"`
	NeverAccepted int `json:"never_accepted"`
	// Visible is, per replica, the ms from each revocation's response to
	// that replica's first 401 for the key; NotRefused counts the
	// revoked keys a replica still accepted after giveUp.
	Visible [][]float64 `json:"visible_ms"`
	// VisibleSent is, per replica, the ms from each revocation's
	// response to the sending of the probe that got the first 401: the
	// replica refused the key between that and Visible, so the gap is
	// the probe's own wait in a busy replica.
	VisibleSent [][]float64 `json:"visible_sent_ms"`
	NotRefused  []int       `json:"not_refused"`
	// ProbeStatus counts the probes' answers by status (0: none).
	ProbeStatus map[int]int `json:"probe_status"`
	Probes      int64       `json:"probes"`
	IssueMs     []float64   `json:"issue_ms"`
	RevokeMs    []float64   `json:"revoke_ms"`
}

type liveKey struct {
	id, key  string
	admin    int
	accepted time.Time
}

type driver struct {
	cfg    driverConfig
	client *http.Client
	probes atomic.Int64

	mu          sync.Mutex
	rep         driverReport
	ready       []liveKey
	firstRevoke time.Time
}

// runDriver churns until ctx ends, waits for the revocations under way to
// be refused everywhere (or to time out), and writes the report as JSON.
func runDriver(ctx context.Context, cfg driverConfig, stdout io.Writer) error {
	if len(cfg.Admins) == 0 || len(cfg.Probes) == 0 || cfg.Token == "" || cfg.Rate < 2 {
		return fmt.Errorf("want -admins, -probes, a token and -rate of at least 2")
	}
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute, DisableCompression: true}
	d := &driver{cfg: cfg, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	d.rep.Visible = make([][]float64, len(cfg.Probes))
	d.rep.VisibleSent = make([][]float64, len(cfg.Probes))
	d.rep.NotRefused = make([]int, len(cfg.Probes))
	d.rep.ProbeStatus = map[int]int{}
	var wg sync.WaitGroup
	// Change n is due at start + n×interval, whenever the driver gets to
	// run: a driver descheduled for a while catches up rather than
	// dropping changes (a time.Ticker drops ticks).
	interval := time.Second / time.Duration(cfg.Rate)
	start := time.Now()
	for n := 0; ctx.Err() == nil; {
		for ; !start.Add(time.Duration(n) * interval).After(time.Now()); n++ {
			if n%2 == 0 {
				i := n / 2 // n moves on while the issue runs
				wg.Go(func() { d.issue(i) })
				continue
			}
			// Revoke the oldest key whose lifetime is over, if there is
			// one yet (none during the first Lifetime).
			d.mu.Lock()
			var k liveKey
			ok := len(d.ready) > 0 && time.Since(d.ready[0].accepted) >= cfg.Lifetime
			if ok {
				k, d.ready = d.ready[0], d.ready[1:]
				if d.firstRevoke.IsZero() {
					d.firstRevoke = time.Now()
				}
			}
			d.mu.Unlock()
			if ok {
				wg.Go(func() { d.revoke(k) })
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(time.Duration(n) * interval))):
		}
	}
	d.rep.Seconds = time.Since(start).Seconds()
	if !d.firstRevoke.IsZero() {
		d.rep.RevokeSeconds = time.Since(d.firstRevoke).Seconds()
	}
	wg.Wait()
	tr.CloseIdleConnections()
	d.rep.Probes = d.probes.Load()
	return json.NewEncoder(stdout).Encode(d.rep)
}

func (d *driver) adminErr(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rep.AdminErrors++
	if d.rep.AdminError == "" {
		d.rep.AdminError = err.Error()
	}
}

// admin makes one admin API call and decodes its JSON answer into v.
func (d *driver) admin(url, body string, want int, v any) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.cfg.Token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		// The body is a problem document; it never holds a key.
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, rb)
	}
	return json.Unmarshal(rb, v)
}

// probe sends the key to a replica's /sync with an empty body and
// returns the status (0 when no answer came).
func (d *driver) probe(url, key string) int {
	d.probes.Add(1)
	status := 0
	defer func() {
		d.mu.Lock()
		d.rep.ProbeStatus[status]++
		d.mu.Unlock()
	}()
	req, err := http.NewRequest(http.MethodPost, url, http.NoBody)
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Api-Key", key)
	resp, err := d.client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	status = resp.StatusCode
	return status
}

// accepted is a status that says the replica took the key: neither a
// refusal of it (401) nor an answer that says nothing about it (429
// before any key is looked at, a 5xx, no answer).
func accepted(status int) bool {
	return status != 0 && status != http.StatusUnauthorized && status != http.StatusTooManyRequests && status < 500
}

// probeWait is the pause after probe try (0 the first): ProbeEvery for
// the first ten, then doubling up to 5×ProbeEvery, so that keys a busy
// replica is slow to refuse (or to accept) do not multiply the probes
// and load it further.
func (d *driver) probeWait(try int) time.Duration {
	if try < 10 {
		return d.cfg.ProbeEvery
	}
	return min(d.cfg.ProbeEvery<<(try-9), 5*d.cfg.ProbeEvery)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// issue issues key n through replica n mod 2's admin API, waits until
// every replica accepts it, and queues it for revocation.
func (d *driver) issue(n int) {
	admin := n % len(d.cfg.Admins)
	body := fmt.Sprintf(`{"product":"extraction","env":"live","context":%q,"name":"churn %d"}`, d.cfg.Context, n)
	var got struct {
		Key string `json:"key"`
		ID  string `json:"id"`
	}
	t0 := time.Now()
	if err := d.admin(d.cfg.Admins[admin]+"/v1/keys", body, http.StatusCreated, &got); err != nil {
		d.adminErr(err)
		return
	}
	took := time.Since(t0)
	d.mu.Lock()
	d.rep.Issued++
	d.rep.IssueMs = append(d.rep.IssueMs, ms(took))
	d.mu.Unlock()
	var wg sync.WaitGroup
	var never atomic.Bool
	for _, url := range d.cfg.Probes {
		wg.Go(func() {
			for try := 0; ; try++ {
				status := d.probe(url, got.Key)
				if accepted(status) {
					return
				}
				if try == 0 && status == http.StatusUnauthorized {
					d.mu.Lock()
					d.rep.NewKeyRefused++
					d.mu.Unlock()
				}
				if time.Since(t0) > giveUp {
					never.Store(true)
					return
				}
				time.Sleep(d.probeWait(try))
			}
		})
	}
	wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	if never.Load() {
		d.rep.NeverAccepted++
		return
	}
	d.ready = append(d.ready, liveKey{id: got.ID, key: got.Key, admin: admin, accepted: time.Now()})
}

// revoke revokes k through the admin API that issued it and probes every
// replica with it, from the revocation's response on, until each refuses
// it.
func (d *driver) revoke(k liveKey) {
	t0 := time.Now()
	var got struct {
		Status string `json:"status"`
	}
	if err := d.admin(d.cfg.Admins[k.admin]+"/v1/keys/"+k.id+"/revoke", "", http.StatusOK, &got); err != nil {
		d.adminErr(err)
		return
	}
	t1 := time.Now()
	d.mu.Lock()
	d.rep.Revoked++
	d.rep.RevokeMs = append(d.rep.RevokeMs, ms(t1.Sub(t0)))
	d.mu.Unlock()
	var wg sync.WaitGroup
	for r, url := range d.cfg.Probes {
		wg.Go(func() {
			for try := 0; ; try++ {
				sent := time.Since(t1)
				status := d.probe(url, k.key)
				since := time.Since(t1)
				d.mu.Lock()
				if status == http.StatusUnauthorized {
					d.rep.Visible[r] = append(d.rep.Visible[r], ms(since))
					d.rep.VisibleSent[r] = append(d.rep.VisibleSent[r], ms(sent))
					d.mu.Unlock()
					return
				}
				if since > giveUp {
					d.rep.NotRefused[r]++
					d.mu.Unlock()
					return
				}
				d.mu.Unlock()
				time.Sleep(d.probeWait(try))
			}
		})
	}
	wg.Wait()
}
