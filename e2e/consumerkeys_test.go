package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestConsumerKeysAcrossReplicas: two replicas of the real binary on one
// Redis keystore, each with its admin API, where a consumer's keys come
// from the replica's own index of the key set. A consumer's list
// (GET /v1/keys?consumer=) holds exactly its keys on both replicas: a key
// issued through one replica is listed by it at once and by the other as
// soon as the change reached it; a revocation through one shows on the
// other at once (the records are read from Redis); another consumer's keys
// are never listed; and the consumer cannot be deleted while it has an
// active key. The whole list (GET /v1/keys, a page at a time, also by
// status) comes from the index too: every key once, in order, the same
// pages on both replicas. None of it reads the key set (no HSCAN; 2570
// without the server's wiring of the index to the admin side).
func TestConsumerKeysAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	_, apis := redisReplicas(t, rs, 2, "keys:read,keys:write,consumers:read,consumers:write")
	a1, a2 := apis[0], apis[1]
	consumer := func(name string) string {
		t.Helper()
		status, con, _ := a1.call("POST", "/v1/consumers", `{"name":"`+name+`","contexts":["`+ctxA+`"]}`)
		if status != http.StatusCreated {
			t.Fatalf("create consumer: %d %v", status, con)
		}
		return con["id"].(string)
	}
	conA, conB := consumer("Acme"), consumer("Bolt")
	issue := func(a *adminAPI, con string) string {
		t.Helper()
		body := `{"product":"extraction","env":"live","context":"` + ctxA + `"`
		if con != "" {
			body += `,"consumer":"` + con + `"`
		}
		status, rec, _ := a.call("POST", "/v1/keys", body+"}")
		if status != http.StatusCreated {
			t.Fatalf("issue: %d %v", status, rec)
		}
		return rec["id"].(string)
	}
	// list is the consumer's keys on a, as "id/status", sorted.
	list := func(a *adminAPI, con string) []string {
		t.Helper()
		status, page, _ := a.call("GET", "/v1/keys?consumer="+con, "")
		if status != http.StatusOK {
			t.Fatalf("list: %d %v", status, page)
		}
		var out []string
		for _, it := range page["items"].([]any) {
			m := it.(map[string]any)
			if m["consumer"] != con {
				t.Errorf("the list of %s holds %v, a key of %v", con, m["id"], m["consumer"])
			}
			out = append(out, m["id"].(string)+"/"+m["status"].(string))
		}
		slices.Sort(out)
		return out
	}
	want := func(ids ...string) []string {
		slices.Sort(ids)
		return ids
	}
	// hscans is redis-server's count of HSCANs: a read of the key set.
	// Both replicas completed their first pass before they were ready,
	// and their next full pass is resync_interval (10m) away.
	hscans := func() int { return rs.Calls(t)["hscan"] }
	scans0 := hscans()
	k1, kb := issue(a1, conA), issue(a1, conB)
	kn := issue(a1, "") // a key of no consumer
	k2 := issue(a1, conA)
	// Through the replica that issued them: at once.
	if got, w := list(a1, conA), want(k1+"/active", k2+"/active"); !slices.Equal(got, w) {
		t.Errorf("replica 1 lists %v for A right after issuing, want %v", got, w)
	}
	// The other replica: once the change log reached it.
	eventually(t, testkit.HangCheck, func() string {
		if got, w := list(a2, conA), want(k1+"/active", k2+"/active"); !slices.Equal(got, w) {
			return fmt.Sprintf("replica 2 lists %v for A, want %v", got, w)
		}
		return ""
	})
	k3 := issue(a2, conA)
	if got, w := list(a2, conA), want(k1+"/active", k2+"/active", k3+"/active"); !slices.Equal(got, w) {
		t.Errorf("replica 2 lists %v for A right after issuing, want %v", got, w)
	}
	eventually(t, testkit.HangCheck, func() string {
		if got, w := list(a1, conA), want(k1+"/active", k2+"/active", k3+"/active"); !slices.Equal(got, w) {
			return fmt.Sprintf("replica 1 lists %v for A, want %v", got, w)
		}
		return ""
	})
	if status, rec, _ := a2.call("POST", "/v1/keys/"+k1+"/revoke", ""); status != http.StatusOK {
		t.Fatalf("revoke: %d %v", status, rec)
	}
	if got, w := list(a1, conA), want(k1+"/revoked", k2+"/active", k3+"/active"); !slices.Equal(got, w) {
		t.Errorf("replica 1 lists %v for A right after a revocation on replica 2, want %v", got, w)
	}
	if got, w := list(a2, conB), want(kb+"/active"); !slices.Equal(got, w) {
		t.Errorf("replica 2 lists %v for B, want %v", got, w)
	}
	if status, body, _ := a1.call("DELETE", "/v1/consumers/"+conA, ""); status != http.StatusConflict || !strings.Contains(fmt.Sprint(body["detail"]), k2) {
		t.Errorf("delete of a consumer with active keys: %d %v", status, body)
	}
	// The whole key list, two keys a page, through either replica: every
	// key once, in the list's order (creation second, then id), the same
	// pages on both.
	walk := func(a *adminAPI, list, query string) (ids []string, pages int) {
		t.Helper()
		cursor, last := "", ""
		for pages = 1; pages < 10; pages++ {
			q := list + "?limit=2" + query
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			status, page, _ := a.call("GET", q, "")
			if status != http.StatusOK {
				t.Fatalf("GET %s: %d %v", q, status, page)
			}
			for _, it := range page["items"].([]any) {
				m := it.(map[string]any)
				created, err := time.Parse(time.RFC3339Nano, m["created_at"].(string))
				if err != nil {
					t.Fatalf("created_at %v: %v", m["created_at"], err)
				}
				pos := fmt.Sprintf("%011d %s", created.Unix(), m["id"])
				if pos <= last {
					t.Errorf("GET %s lists %s after %s", q, pos, last)
				}
				last = pos
				id := m["id"].(string)
				if st, ok := m["status"].(string); ok {
					id += "/" + st
				}
				ids = append(ids, id)
			}
			if cursor, _ = page["next_cursor"].(string); cursor == "" {
				return ids, pages
			}
		}
		t.Fatalf("GET %s%s: no last page", list, query)
		return nil, 0
	}
	all := want(k1+"/revoked", k2+"/active", k3+"/active", kb+"/active", kn+"/active")
	for _, query := range []string{"", "&status=active"} {
		got1, pages1 := walk(a1, "/v1/keys", query)
		got2, pages2 := walk(a2, "/v1/keys", query)
		w := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return query != "" && strings.HasSuffix(s, "/revoked") })
		if !slices.Equal(got1, got2) || pages1 != pages2 || !slices.Equal(slices.Sorted(slices.Values(got1)), w) {
			t.Errorf("GET /v1/keys?limit=2%s: replica 1 lists %v in %d pages, replica 2 %v in %d; want %v", query, got1, pages1, got2, pages2, w)
		}
		if want := (len(w) + 1) / 2; pages1 != want {
			t.Errorf("GET /v1/keys?limit=2%s: %d pages for %d keys, want %d", query, pages1, len(w), want)
		}
	}
	// The consumer list likewise, from either replica's copy of the
	// consumers, a third one made through replica 2 included: at once on
	// replica 2, as soon as the change reaches it on replica 1 (a
	// replica's copy follows the change log), in the list's order (walk
	// checks it).
	status, conC, _ := a2.call("POST", "/v1/consumers", `{"name":"Cobalt"}`)
	if status != http.StatusCreated {
		t.Fatalf("create consumer: %d %v", status, conC)
	}
	cons := []string{conA, conB, conC["id"].(string)}
	slices.Sort(cons)
	if got, pages := walk(a2, "/v1/consumers", ""); !slices.Equal(slices.Sorted(slices.Values(got)), cons) || pages != 2 {
		t.Errorf("GET /v1/consumers?limit=2 on replica 2, which made the third: %v in %d pages; want %v in 2", got, pages, cons)
	}
	testkit.Eventually(t, testkit.HangCheck, "both replicas list the three consumers alike", func() error {
		got1, pages1 := walk(a1, "/v1/consumers", "")
		got2, pages2 := walk(a2, "/v1/consumers", "")
		if !slices.Equal(got1, got2) || !slices.Equal(slices.Sorted(slices.Values(got1)), cons) || pages1 != 2 || pages2 != 2 {
			return fmt.Errorf("replica 1 lists %v in %d pages, replica 2 %v in %d; want %v in 2", got1, pages1, got2, pages2, cons)
		}
		return nil
	})
	if n := hscans() - scans0; n != 0 {
		t.Errorf("the key and consumer lists and the consumers' checks read the key set or the consumers: %d HSCANs", n)
	}
}

// redisReplicas starts n replicas of the real binary on rs's Redis
// keystore, each with its admin API, and returns them with an admin API
// client each, holding one admin token of scopes.
func redisReplicas(t *testing.T, rs *redistest.Server, n int, scopes string) ([]*gateway, []*adminAPI) {
	t.Helper()
	var gs []*gateway
	var apis []*adminAPI
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	for range n {
		addr := testkit.FreeAddr(t)
		g := startGateway(t, gwOpts{skipStart: true, extra: fmt.Sprintf("redis:\n  addrs: [%q]\n"+slowMachineRedis+"admin_api:\n  enabled: true\n  listen: %q\n", rs.Addr, addr)})
		g.rewriteConfig(func(c string) string {
			c = strings.Replace(c, "ratelimit:\n  backend: local", "ratelimit:\n  backend: local\n"+slowMachineRateLimit, 1)
			return strings.Replace(c, "keystore:\n  backend: file", "keystore:\n  backend: redis", 1)
		})
		g.start()
		gs = append(gs, g)
		apis = append(apis, &adminAPI{t: t, base: "https://" + addr, client: client})
	}
	out, errOut, err := gs[0].keygate("admin-tokens", "create", "--name", "e2e", "--scopes", scopes)
	if err != nil {
		t.Fatalf("admin-tokens create: %v\n%s", err, errOut)
	}
	for _, a := range apis {
		a.token = strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	}
	return gs, apis
}
