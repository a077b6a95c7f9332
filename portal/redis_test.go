package portal_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/portal"
)

// With Redis, sessions and sign-in links are shared by every replica: a
// link made on one opens on another, a session started on one is honoured
// by the other, a sign-out on one ends it on both, and a link still works
// once only across replicas. Redis holds hashes of the secrets, never the
// secrets.
func TestSessionsSharedThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	withRedis := func(_ *portal.Config, d *portal.Deps) { d.Redis, d.RedisPrefix = rc, "kg1:" }
	r1 := newFixture(t, withRedis)
	r2 := sharedStore(t, r1, withRedis) // a second replica: same keystore, same Redis

	link, _, err := r1.portal.SessionLink(context.Background(), keyops.Actor{ID: "tok"}, conA, "alice")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(link, r1.srv.URL+"/session/")
	keys, err := rc.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "kg1:portal:") || strings.Contains(k, secret) {
			t.Fatalf("Redis key %q: outside the prefix, or holding the link's secret", k)
		}
	}

	b := r2.browser(t)
	if p := b.post("/session/" + secret); p.status != http.StatusSeeOther {
		t.Fatalf("link made on replica 1, opened on replica 2: %d", p.status)
	}
	if p := r1.browser(t).post("/session/" + secret); p.status != http.StatusGone {
		t.Fatalf("the same link again on replica 1: %d, want 410", p.status)
	}
	// The same cookie on replica 1 (the jar is per host, so copy it).
	cookie := b.c.Jar.Cookies(mustURL(t, r2.srv.URL))
	b1 := r1.browser(t)
	b1.c.Jar.SetCookies(mustURL(t, r1.srv.URL), cookie)
	if p := b1.get("/keys"); p.status != 200 || !strings.Contains(p.body, keyA) {
		t.Fatalf("replica 1 does not honour replica 2's session: %d", p.status)
	}
	if p := b1.post("/logout", "csrf", b1.csrf()); p.status != http.StatusSeeOther {
		t.Fatalf("sign out on replica 1: %d", p.status)
	}
	if p := b.get("/keys"); p.status != http.StatusSeeOther {
		t.Fatalf("replica 2 still honours a session signed out on replica 1: %d", p.status)
	}
}

// With Redis, the new key crosses the redirect through Redis, sealed: the
// page on another replica shows it once, and Redis never holds it in the
// clear.
func TestIssuedKeyThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	withRedis := func(_ *portal.Config, d *portal.Deps) { d.Redis, d.RedisPrefix = rc, "kg1:" }
	r1 := newFixture(t, withRedis)
	r2 := sharedStore(t, r1, withRedis)

	a := r1.signIn(t, conA)
	created := a.post("/keys", "csrf", a.csrf(), "product", "extraction", "env", "live", "context", ctxA)
	if created.status != http.StatusSeeOther {
		t.Fatalf("create: %d", created.status)
	}
	ctx := context.Background()
	keys, err := rc.Keys(ctx, "kg1:portal:flash:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("flash keys in Redis: %v %v", keys, err)
	}
	sealed, _ := rc.Get(ctx, keys[0]).Bytes()

	// The same session on replica 2 follows the redirect.
	b := r2.browser(t)
	b.c.Jar.SetCookies(mustURL(t, r2.srv.URL), a.c.Jar.Cookies(mustURL(t, r1.srv.URL)))
	key := b.followIssued(created)
	if strings.Contains(string(sealed), key) || strings.Contains(string(sealed), strings.TrimPrefix(key, "svc_live_")) {
		t.Fatal("Redis held the new key in the clear")
	}
	if n, _ := rc.Exists(ctx, keys[0]).Result(); n != 0 {
		t.Fatal("the flash outlived its one view")
	}
}
