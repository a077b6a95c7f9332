package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/audit"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
)

const (
	apiKey = "svc_live_4f9Qk2ZpR7xT1mWcB8nLd3HsVy6Ja0EuKg5rNo"
	token  = "kga_XoD5mUFSMXGWhxBshbQ0LPCJSBLVNl4LDQuj"
	hash   = "sha256:c9a286de4b97a8aae6d249b5acfb424af0643c903f8aac8119988291bdab702a"
	jwt    = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
)

func TestScrub(t *testing.T) {
	t.Parallel()
	for _, in := range []string{apiKey, token, hash, "Bearer abc.def", jwt, "x=" + hash + ";" + apiKey} {
		out := audit.Scrub(in)
		for _, secret := range []string{apiKey[9:], token[4:], hash[7:], "abc.def", jwt} {
			if strings.Contains(out, secret) {
				t.Errorf("Scrub(%q) = %q still holds a secret", in, out)
			}
		}
	}
	if got := audit.Scrub("key_0123456789abcdef name=a"); got != "key_0123456789abcdef name=a" {
		t.Errorf("Scrub changed text without secrets: %q", got)
	}
}

func open(t *testing.T, client redis.UniversalClient) *audit.Log {
	t.Helper()
	l, err := audit.Open(audit.Config{File: filepath.Join(t.TempDir(), "sub", "jsonl"), RedisMaxLen: 1000, Redis: client, Prefix: "kg:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestLogAndRead: on the file and on the Redis stream, events are
// written scrubbed and read back newest first, filtered and paged with a
// cursor that visits each event once; the file has mode 0600.
func TestLogAndRead(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{rs.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	for name, client := range map[string]redis.UniversalClient{"file": nil, "redis": c} {
		t.Run(name, func(t *testing.T) {
			l := open(t, client)
			ctx := context.Background()
			t0 := time.Now().UTC().Add(-30 * time.Minute).Truncate(time.Minute) // within the stream's skew margin
			const n = 25
			for i := range n {
				e := keyops.Event{
					Time: t0.Add(time.Duration(i) * time.Minute), Actor: keyops.Actor{ID: fmt.Sprintf("cli:u%d", i%2), Addr: "10.0.0.1:5000"},
					Action: "key.update", Target: fmt.Sprintf("key_%016d", i%3),
					Changes: map[string]string{"name": "n " + apiKey, "key": "whatever", "note": hash, "token": token},
				}
				if i == 3 {
					e.Err = errors.New("update failed for Bearer " + jwt)
				}
				if err := l.Audit(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			data, err := os.ReadFile(l.File())
			if err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Stat(l.File()); fi.Mode().Perm() != 0o600 {
				t.Errorf("audit file mode %v, want 0600", fi.Mode().Perm())
			}
			raw := string(data)
			if client != nil {
				msgs, err := client.XRange(ctx, audit.StreamKey("kg:"), "-", "+").Result()
				if err != nil || len(msgs) != n {
					t.Fatalf("stream: %d entries, %v", len(msgs), err)
				}
				for _, m := range msgs {
					raw += fmt.Sprint(m.Values)
				}
			}
			for _, secret := range []string{apiKey[9:], token[4:], hash[7:], jwt, "whatever"} {
				if strings.Contains(raw, secret) {
					t.Errorf("the audit log holds %q", secret)
				}
			}
			// All, in pages of 7: each event once, newest first.
			var all []audit.Event
			q := audit.Query{Limit: 7}
			for pages := 0; ; pages++ {
				page, next, err := l.Events(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, page...)
				if next == "" {
					break
				}
				if pages > 10 {
					t.Fatal("paging does not end")
				}
				q.Cursor = next
			}
			if len(all) != n {
				t.Fatalf("read %d events in pages, want %d", len(all), n)
			}
			seen := map[string]bool{}
			for i, e := range all {
				if seen[e.ID] {
					t.Errorf("event %s read twice", e.ID)
				}
				seen[e.ID] = true
				if i > 0 && e.Time.After(all[i-1].Time) {
					t.Errorf("events not newest first at %d", i)
				}
			}
			if e := all[n-1-3]; e.Outcome != "error" || !strings.Contains(e.Error, "update failed") || strings.Contains(e.Error, jwt) {
				t.Errorf("the failed event: %+v", e)
			}
			if e := all[0]; e.Actor != "cli:u0" || e.Source != "10.0.0.1:5000" || e.Outcome != "ok" || e.Changes["key"] != "[REDACTED]" {
				t.Errorf("newest event: %+v", e)
			}
			// Filters.
			got, _, err := l.Events(ctx, audit.Query{Actor: "cli:u1", Target: fmt.Sprintf("key_%016d", 1), Since: t0.Add(5 * time.Minute), Until: t0.Add(20 * time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			var mins []int
			for _, e := range got {
				mins = append(mins, int(e.Time.Sub(t0)/time.Minute))
			}
			if fmt.Sprint(mins) != "[19 13 7]" {
				t.Errorf("filtered events at minutes %v, want [19 13 7]", mins)
			}
			if _, _, err := l.Events(ctx, audit.Query{Cursor: "bogus"}); !errors.Is(err, audit.ErrInvalidCursor) {
				t.Errorf("bogus cursor: %v", err)
			}
		})
	}
}

// TestStreamIsCapped: the stream keeps about redis_max_len events.
func TestStreamIsCapped(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{rs.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	l, err := audit.Open(audit.Config{File: filepath.Join(t.TempDir(), "jsonl"), RedisMaxLen: 10, Redis: c})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 500 {
		if err := l.Audit(context.Background(), keyops.Event{Time: time.Now(), Actor: keyops.Actor{ID: "cli:x"}, Action: "key.revoke", Target: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := c.XLen(context.Background(), audit.StreamKey("")).Result()
	if err != nil || n >= 500 || n < 10 {
		t.Errorf("stream length %d (%v), want capped near 10", n, err)
	}
}

// TestTornLineIsSkipped: a last line cut short by a crash is ended on
// the next Open, so the next event stays readable and the torn one is
// skipped.
func TestTornLineIsSkipped(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jsonl")
	if err := os.WriteFile(path, []byte(`{"id":"evt_1","actor":"cli:a","action":"key.issue","outcome":"ok"}`+"\n"+`{"id":"evt_2","act`), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(audit.Config{File: path})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Audit(context.Background(), keyops.Event{Time: time.Now(), Actor: keyops.Actor{ID: "cli:b"}, Action: "key.revoke", Target: "key_1"}); err != nil {
		t.Fatal(err)
	}
	events, next, err := l.Events(context.Background(), audit.Query{})
	if err != nil || next != "" || len(events) != 2 || events[0].Actor != "cli:b" || events[1].ID != "evt_1" {
		t.Errorf("Events = %+v, %q, %v", events, next, err)
	}
}

// TestStreamOnly: audit.file none writes only the stream, and needs one.
func TestStreamOnly(t *testing.T) {
	t.Parallel()
	if _, err := audit.Open(audit.Config{File: audit.NoFile}); err == nil {
		t.Error("file none without Redis was accepted")
	}
	rs := redistest.Start(t)
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{rs.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	l, err := audit.Open(audit.Config{File: audit.NoFile, Redis: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Audit(context.Background(), keyops.Event{Time: time.Now(), Actor: keyops.Actor{ID: "cli:x"}, Action: "key.revoke", Target: "key_1"}); err != nil {
		t.Fatal(err)
	}
	if events, _, err := l.Events(context.Background(), audit.Query{}); err != nil || len(events) != 1 || events[0].Target != "key_1" {
		t.Errorf("Events = %+v, %v", events, err)
	}
	if _, err := os.Stat(audit.NoFile); err == nil {
		t.Error(`a file named "none" was written`)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
}

// TestAuditAllKeepsEveryEventInOrder: a batch (a purge's key.purge
// events) lands as the same events one by one would: every one, in
// order, one line each in the file, scrubbed, and in the stream, also
// past one pipeline's worth; Audit's events around it stay in place.
func TestAuditAllKeepsEveryEventInOrder(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{rs.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	l, err := audit.Open(audit.Config{File: filepath.Join(t.TempDir(), "jsonl"), RedisMaxLen: 100000, Redis: c, Prefix: "kg:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	now := time.Now().UTC()
	ev := func(i int) keyops.Event {
		return keyops.Event{Time: now, Actor: keyops.Actor{ID: "cli:ops"}, Action: "key.purge", Target: fmt.Sprintf("key_%016d", i),
			Changes: map[string]string{"status": "revoked", "note": apiKey}}
	}
	if err := l.Audit(ctx, ev(0)); err != nil {
		t.Fatal(err)
	}
	var batch []keyops.Event
	for i := 1; i <= 2500; i++ {
		batch = append(batch, ev(i))
	}
	if err := l.AuditAll(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := l.Audit(ctx, ev(2501)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(l.File())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	msgs, err := c.XRange(ctx, audit.StreamKey("kg:"), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2502 || len(msgs) != 2502 {
		t.Fatalf("file %d lines, stream %d entries; want 2502 each", len(lines), len(msgs))
	}
	for i := range lines {
		var e audit.Event
		if err := json.Unmarshal([]byte(lines[i]), &e); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		want := fmt.Sprintf("key_%016d", i)
		if e.Target != want || !strings.Contains(fmt.Sprint(msgs[i].Values), want) {
			t.Fatalf("event %d: file %s, stream %v; want %s", i, e.Target, msgs[i].Values, want)
		}
		if strings.Contains(lines[i], apiKey[9:]) {
			t.Fatalf("line %d holds the key", i)
		}
	}
}
