package certstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/keygate/keygate/certstore"
	"github.com/keygate/keygate/internal/testsupport/redistest"
)

func newClient(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := srv.Client(t)
	return c
}

func newRedis(t testing.TB, c redis.UniversalClient, opts certstore.Options) *certstore.Redis {
	t.Helper()
	s, err := certstore.NewRedis(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seed is the content every semantics case starts from. "certs/ca-x" sits
// next to "certs/ca" to catch prefix matching that is not per component.
var seed = map[string]string{
	"acme/ca/users/a@b/a.json": "account",
	"acme/ca/users/a@b/a.key":  "account-key",
	"certs/ca/site/site.crt":   "cert",
	"certs/ca/site/site.key":   "key",
	"certs/ca-x/other.crt":     "other",
	"top.txt":                  "top",
}

type result struct {
	Value    any
	NotExist bool // the error wraps fs.ErrNotExist
	Err      bool // any other error
}

func res(v any, err error) result {
	switch {
	case err == nil:
		return result{Value: v}
	case errors.Is(err, fs.ErrNotExist):
		return result{NotExist: true}
	default:
		return result{Err: true}
	}
}

// TestSemanticsMatchFileStorage runs one table against certmagic's
// FileStorage and against Redis: both must give the expected answer, so
// certmagic sees the same storage whichever backend is configured.
func TestSemanticsMatchFileStorage(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv)

	type stat struct {
		Key        string
		Size       int64
		IsTerminal bool
	}
	statOf := func(s certmagic.Storage, key string) result {
		ki, err := s.Stat(context.Background(), key)
		if !ki.IsTerminal {
			ki.Size = 0 // a directory's size is the file system's business
		}
		return res(stat{ki.Key, ki.Size, ki.IsTerminal}, err)
	}
	list := func(s certmagic.Storage, p string, rec bool) result {
		keys, err := s.List(context.Background(), p, rec)
		if keys == nil {
			keys = []string{}
		}
		return res(keys, err)
	}
	exists := func(s certmagic.Storage, keys ...string) result {
		var out []bool
		for _, k := range keys {
			out = append(out, s.Exists(context.Background(), k))
		}
		return result{Value: out}
	}
	load := func(s certmagic.Storage, key string) result {
		v, err := s.Load(context.Background(), key)
		return res(string(v), err)
	}

	cases := []struct {
		name string
		run  func(s certmagic.Storage) result
		want result
	}{
		{"load a stored value", func(s certmagic.Storage) result { return load(s, "certs/ca/site/site.crt") }, result{Value: "cert"}},
		{"load a missing key is fs.ErrNotExist", func(s certmagic.Storage) result { return load(s, "certs/ca/nope.crt") }, result{NotExist: true}},
		{"store overwrites", func(s certmagic.Storage) result {
			if err := s.Store(context.Background(), "top.txt", []byte("new")); err != nil {
				return res(nil, err)
			}
			return load(s, "top.txt")
		}, result{Value: "new"}},
		{"exists for values and directories, not for partial names", func(s certmagic.Storage) result {
			return exists(s, "top.txt", "certs", "certs/ca", "certs/ca/site/site.key", "cert", "certs/c", "nope")
		}, result{Value: []bool{true, true, true, true, false, false, false}}},
		{"stat of a value", func(s certmagic.Storage) result { return statOf(s, "certs/ca/site/site.key") }, result{Value: stat{"certs/ca/site/site.key", 3, true}}},
		{"stat of a directory", func(s certmagic.Storage) result { return statOf(s, "certs/ca") }, result{Value: stat{"certs/ca", 0, false}}},
		{"stat of a missing key is fs.ErrNotExist", func(s certmagic.Storage) result { return statOf(s, "certs/zz") }, result{NotExist: true}},
		{"list one level", func(s certmagic.Storage) result { return list(s, "certs", false) }, result{Value: []string{"certs/ca", "certs/ca-x"}}},
		{"list recursive walks directories depth first", func(s certmagic.Storage) result { return list(s, "certs", true) },
			result{Value: []string{"certs/ca", "certs/ca/site", "certs/ca/site/site.crt", "certs/ca/site/site.key", "certs/ca-x", "certs/ca-x/other.crt"}}},
		{"list a deeper directory", func(s certmagic.Storage) result { return list(s, "acme/ca/users", true) },
			result{Value: []string{"acme/ca/users/a@b", "acme/ca/users/a@b/a.json", "acme/ca/users/a@b/a.key"}}},
		{"list a value lists nothing", func(s certmagic.Storage) result { return list(s, "top.txt", true) }, result{Value: []string{}}},
		{"list a missing prefix is fs.ErrNotExist", func(s certmagic.Storage) result { return list(s, "nope", false) }, result{NotExist: true}},
		{"delete a directory removes everything below it and nothing beside it", func(s certmagic.Storage) result {
			if err := s.Delete(context.Background(), "certs/ca"); err != nil {
				return res(nil, err)
			}
			return exists(s, "certs/ca", "certs/ca/site", "certs/ca/site/site.crt", "certs/ca-x/other.crt", "certs")
		}, result{Value: []bool{false, false, false, true, true}}},
		{"delete a value", func(s certmagic.Storage) result {
			if err := s.Delete(context.Background(), "certs/ca/site/site.crt"); err != nil {
				return res(nil, err)
			}
			return exists(s, "certs/ca/site/site.crt", "certs/ca/site/site.key")
		}, result{Value: []bool{false, true}}},
		{"delete the last value of a directory removes the directory", func(s certmagic.Storage) result {
			if err := s.Delete(context.Background(), "certs/ca-x/other.crt"); err != nil {
				return res(nil, err)
			}
			_ = s.Delete(context.Background(), "certs/ca-x") // FileStorage keeps the empty dir; remove it the same way
			return exists(s, "certs/ca-x")
		}, result{Value: []bool{false}}},
		{"delete a missing key is not an error", func(s certmagic.Storage) result {
			return res("ok", s.Delete(context.Background(), "no/such/key"))
		}, result{Value: "ok"}},
	}

	for i, tc := range cases {
		backends := map[string]func(t *testing.T) certmagic.Storage{
			"file": func(t *testing.T) certmagic.Storage { return &certmagic.FileStorage{Path: t.TempDir()} },
			"redis": func(t *testing.T) certmagic.Storage {
				return newRedis(t, client, certstore.Options{Prefix: fmt.Sprintf("case%d:", i)})
			},
		}
		for bname, mk := range backends {
			t.Run(bname+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := mk(t)
				for k, v := range seed {
					if err := s.Store(context.Background(), k, []byte(v)); err != nil {
						t.Fatal(err)
					}
				}
				got := tc.run(s)
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
			})
		}
	}
}

func TestRoundTripAndStatTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newRedis(t, newClient(t, srv), certstore.Options{})
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	val := []byte("-----BEGIN CERTIFICATE-----\nbinary\x00\xff\n")
	if err := s.Store(ctx, "certs/x/x.crt", val); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "certs/x/x.crt")
	if err != nil || string(got) != string(val) {
		t.Fatalf("Load = %q, %v; want %q", got, err, val)
	}
	ki, err := s.Stat(ctx, "certs/x/x.crt")
	if err != nil {
		t.Fatal(err)
	}
	if ki.Modified.Before(before) || ki.Modified.After(time.Now().Add(time.Second)) || ki.Size != int64(len(val)) {
		t.Errorf("Stat = %+v", ki)
	}
	// The keys live under the configured prefix and one hash tag.
	if n, err := srv.Do("EXISTS", "keygate:certmagic:{certmagic}/d/certs/x/x.crt"); err != nil || n != "1" {
		t.Errorf("EXISTS data key = %q, %v", n, err)
	}
}

func TestLockMutualExclusionAcrossClients(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newRedis(t, newClient(t, srv), certstore.Options{LockPoll: 5 * time.Millisecond, LockPollMax: 20 * time.Millisecond})
	b := newRedis(t, newClient(t, srv), certstore.Options{LockPoll: 5 * time.Millisecond, LockPollMax: 20 * time.Millisecond})
	ctx := context.Background()

	var inside, maxInside, total atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if err := s.Lock(ctx, "issue_cert_example.test"); err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				total.Add(1)
				inside.Add(-1)
				if err := s.Unlock(ctx, "issue_cert_example.test"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 || total.Load() != 40 {
		t.Errorf("max holders at once = %d (want 1), critical sections = %d (want 40)", maxInside.Load(), total.Load())
	}

	// TryLock and a bounded Lock fail while the other side holds it.
	if err := a.Lock(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx, "x"); ok || err != nil {
		t.Errorf("TryLock while held = %v, %v; want false, nil", ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := b.Lock(short, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock while held with an ending ctx = %v, want DeadlineExceeded", err)
	}
	if err := b.Unlock(ctx, "x"); err == nil {
		t.Error("Unlock of a lock b does not hold succeeded")
	}
	if err := a.Unlock(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx, "x"); !ok || err != nil {
		t.Errorf("TryLock after release = %v, %v; want true, nil", ok, err)
	}
}

func TestLockIsRefreshedWhileHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ttl := time.Second
	a := newRedis(t, newClient(t, srv), certstore.Options{LockTTL: ttl})
	b := newRedis(t, newClient(t, srv), certstore.Options{LockTTL: ttl})
	ctx := context.Background()
	if err := a.Lock(ctx, "renew"); err != nil {
		t.Fatal(err)
	}
	// Hold for several TTLs: the refresher must keep b out throughout.
	for range 8 {
		time.Sleep(ttl / 2)
		if ok, err := b.TryLock(ctx, "renew"); ok || err != nil {
			t.Fatalf("b took a lock a still holds (ok=%v err=%v)", ok, err)
		}
	}
	if err := a.Unlock(ctx, "renew"); err != nil {
		t.Fatal(err)
	}
}

func TestLockExpiresWhenHolderDies(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ttl := 300 * time.Millisecond
	deadClient := newClient(t, srv)
	a := newRedis(t, deadClient, certstore.Options{LockTTL: ttl})
	b := newRedis(t, newClient(t, srv), certstore.Options{LockTTL: ttl, LockPoll: 10 * time.Millisecond})
	ctx := context.Background()
	if err := a.Lock(ctx, "issue_cert_dead.test"); err != nil {
		t.Fatal(err)
	}
	// The holder "dies": its connection to Redis goes away, so its
	// refresher can no longer extend the lock.
	_ = deadClient.Close()

	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.Lock(waitCtx, "issue_cert_dead.test"); err != nil {
		t.Fatalf("lock of a dead holder never expired: %v", err)
	}
	if err := b.Unlock(ctx, "issue_cert_dead.test"); err != nil {
		t.Fatal(err)
	}
}

func TestStaleUnlockLeavesNewHolderAlone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newRedis(t, newClient(t, srv), certstore.Options{})
	b := newRedis(t, newClient(t, srv), certstore.Options{LockPoll: 10 * time.Millisecond})
	c := newRedis(t, newClient(t, srv), certstore.Options{})
	ctx := context.Background()
	if err := a.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	// a's lease runs out (as after a long GC pause) and b takes the lock.
	if err := a.RenewLockLease(ctx, "l", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Lock(waitCtx, "l"); err != nil {
		t.Fatal(err)
	}
	// a's late Unlock must not release b's lock.
	if err := a.Unlock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.TryLock(ctx, "l"); ok || err != nil {
		t.Errorf("a stale Unlock released b's lock (TryLock = %v, %v)", ok, err)
	}
	if err := b.Unlock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
}

func TestNewRedisRejectsBadOptions(t *testing.T) {
	t.Parallel()
	if _, err := certstore.NewRedis(nil, certstore.Options{}); err == nil {
		t.Error("nil client accepted")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := certstore.NewRedis(c, certstore.Options{LockTTL: time.Millisecond}); err == nil {
		t.Error("1ms LockTTL accepted")
	}
}

func BenchmarkRedisLoad(b *testing.B) {
	srv := redistest.Start(b)
	s := newRedis(b, newClient(b, srv), certstore.Options{})
	ctx := context.Background()
	val := make([]byte, 2048)
	if err := s.Store(ctx, "certs/ca/site/site.crt", val); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Load(ctx, "certs/ca/site/site.crt"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRedisLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	s := newRedis(b, newClient(b, srv), certstore.Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Lock(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		if err := s.Unlock(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDeleteRefusesTheRoot: a key that normalises to the root ("", "/",
// ".") names the whole store. Delete refuses it, as Store does, rather than
// wiping every certificate and account.
func TestDeleteRefusesTheRoot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newRedis(t, newClient(t, srv), certstore.Options{})
	ctx := context.Background()
	for k, v := range seed {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"", "/", ".", "//"} {
		if err := s.Delete(ctx, key); err == nil {
			t.Errorf("Delete(%q) = nil, want an error", key)
		}
	}
	for k := range seed {
		if !s.Exists(ctx, k) {
			t.Errorf("%s is gone after Delete of the root", k)
		}
	}
}
