package gateway_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/keygate/keygate/internal/testsupport/testkit"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/usage"
)

// TestUsageOutcomes: each finished request of a known key is counted once
// under its outcome; unknown keys and requests refused before the
// limiter for another reason are not.
func TestUsageOutcomes(t *testing.T) {
	t.Parallel()
	c := usage.NewCounters(0)
	e := newEnv(t, envOpts{usage: c, limits: map[string]policy.Limit{
		"live": {Rate: 1, Per: time.Hour, Burst: 2},
		"test": {Rate: 1000, Per: time.Second, Burst: 1000, Quota: policy.Quota{Requests: 1, Per: time.Hour}},
	}})
	before := time.Now()
	if r := e.sync(e.LiveKey, ctxA); r.Status != 200 {
		t.Fatalf("admitted: %d", r.Status)
	}
	assertError(t, e.sync(e.LiveKey, ctxB), 403, "Invalid Context")
	assertError(t, e.sync(e.LiveKey, ctxA), 429, "")
	if r := e.sync(e.TestKey, ctxA); r.Status != 200 {
		t.Fatalf("test key: %d", r.Status)
	}
	assertError(t, e.sync(e.TestKey, ctxA), 429, "quota")
	assertError(t, e.sync(e.RegistryKey, ctxA), 403, "extraction product")
	assertError(t, e.sync("ek_live_unknown", ctxA), 401, "")
	e.do(e.request("GET", "/nowhere", e.LiveKey, "", nil))

	got := map[string]usage.Delta{}
	for _, d := range c.Drain() {
		got[d.ID] = d
	}
	if len(got) != 3 {
		t.Fatalf("%d keys counted, want 3: %+v", len(got), got)
	}
	var live, test, reg usage.Delta
	for id, d := range got {
		switch {
		case id == e.LiveID:
			live = d
		case d.Quota > 0:
			test = d
		default:
			reg = d
		}
	}
	if want := (usage.Counts{Admitted: 1, Context: 1, Rate: 1, BytesIn: live.BytesIn}); live.Counts != want || live.BytesIn <= 0 {
		t.Errorf("live key: %+v, want %+v and some bytes", live.Counts, want)
	}
	if test.Admitted != 1 || test.Quota != 1 {
		t.Errorf("test key: %+v", test.Counts)
	}
	if reg.Product != 1 || reg.Admitted != 0 {
		t.Errorf("registry key on /sync: %+v", reg.Counts)
	}
	if live.LastUsed.Before(before.Truncate(time.Millisecond)) || live.LastUsed.After(time.Now()) {
		t.Errorf("last used %v, not within the test", live.LastUsed)
	}
}

// TestBytesIn: the access line's bytes_in and the usage's bytes in are
// the request body's size for a forwarded request, whether keygate read
// it whole (a small upload), streamed it through the context check (a
// large one), or passed it on (a registry call); a request refused
// before it was forwarded counts none of its body.
func TestBytesIn(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	c := usage.NewCounters(0)
	e := newEnv(t, envOpts{usage: c, logger: zap.New(core), maxBody: 8 << 20})
	smallCT, small := syncForm(t, ctxA)
	bigCT, big := form(t, part{"contextId", ctxA}, part{"id", "1"}, part{"files", strings.Repeat("%PDF-1.7 ", 300<<10/9)})
	lateCT, late := form(t, part{"files", strings.Repeat("%PDF-1.7 ", 300<<10/9)}, part{"contextId", ctxB})
	for _, tc := range []struct {
		name   string
		key    string
		method string
		path   string
		ct     string
		body   []byte
		status int
		want   int64
	}{
		{"small upload, read whole", e.LiveKey, "POST", "/sync", smallCT, small, 200, int64(len(small))},
		{"300 KiB upload, streamed", e.LiveKey, "POST", "/sync", bigCT, big, 200, int64(len(big))},
		{"registry call with a body", e.RegistryKey, "POST", "/registry/schemas", "application/json", []byte(`{"name":"invoice"}`), 200, 18},
		{"context refused after the file", e.LiveKey, "POST", "/sync", lateCT, late, 403, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Drain()
			n := logs.Len()
			r := e.do(e.request(tc.method, tc.path, tc.key, tc.ct, bytes.NewReader(tc.body)))
			if r.Status != tc.status {
				t.Fatalf("status %d, want %d: %.200s", r.Status, tc.status, r.Body)
			}
			var line map[string]any
			testkit.Eventually(t, testkit.HangCheck, "the access line", func() error {
				for _, l := range logs.All()[n:] {
					if l.Message == "request" {
						line = l.ContextMap()
						return nil
					}
				}
				return errors.New("not written yet")
			})
			if line["bytes_in"] != tc.want {
				t.Errorf("access line bytes_in %v, want %d", line["bytes_in"], tc.want)
			}
			var counted int64
			for _, d := range c.Drain() {
				counted += d.BytesIn
			}
			if counted != tc.want {
				t.Errorf("usage bytes in %d, want %d", counted, tc.want)
			}
		})
	}
}
