package keystore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// within bounds the wait for a running FileStore to see a change to its
// file: a hang check.
const within = testkit.HangCheck

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, within, what, func() error { return testkit.True(cond(), "not yet") })
}

type reload struct {
	keys int
	err  error
}

func openStore(t *testing.T, cfg FileConfig) (*FileStore, chan reload) {
	t.Helper()
	ch := make(chan reload, 100)
	cfg.Logger = zaptest.NewLogger(t)
	cfg.OnReload = func(n int, err error) {
		select {
		case ch <- reload{n, err}:
		default:
		}
	}
	s, err := OpenFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if err := s.Close(); err != nil {
			t.Error("second Close:", err)
		}
	})
	return s, ch
}

func found(s *FileStore, key string) (Record, bool) {
	r, ok, err := s.Lookup(context.Background(), HashKey(key))
	if err != nil {
		panic(err)
	}
	return r, ok
}

func TestFileStoreAbsentFileThenIssued(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		path func(dir string) string
		cfg  FileConfig
	}{
		{"watched directory", func(d string) string { return filepath.Join(d, "keys.yaml") }, FileConfig{}},
		{"directory created later", func(d string) string { return filepath.Join(d, "etc", "keygate", "keys.yaml") }, FileConfig{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Path = tc.path(t.TempDir())
			s, reloads := openStore(t, cfg)
			if !s.Ready() || s.Len() != 0 {
				t.Fatalf("absent file: Ready %v, Len %d; want ready and empty", s.Ready(), s.Len())
			}
			if r := <-reloads; r.err != nil || r.keys != 0 {
				t.Fatalf("first OnReload = %+v", r)
			}
			admin := &FileAdmin{Path: cfg.Path}
			key, rec, err := admin.Issue(context.Background(), IssueRequest{Product: Extraction, Env: Live, Context: ctxA, Name: "a"})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := found(s, bump(key, KeyLen-1)); ok {
				t.Fatal("found a different key")
			}
			// A directory created later is seen by the poll (filePoll).
			testkit.Eventually(t, testkit.HangCheck, "issued key found", func() error { _, ok := found(s, key); return testkit.True(ok, "not yet") })
			got, _ := found(s, key)
			if got.ID != rec.ID || got.Context != ctxA || got.StateAt(time.Now()) != Active || s.Len() != 1 {
				t.Errorf("Lookup = %+v, Len %d", got, s.Len())
			}
		})
	}
}

func TestFileStoreSeesRevokeAndRotate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	now := time.Now()
	admin := &FileAdmin{Path: path, Now: func() time.Time { return now }}
	ctx := context.Background()
	k1, r1, err := admin.Issue(ctx, IssueRequest{Product: Extraction, Env: Live, Context: ctxA})
	if err != nil {
		t.Fatal(err)
	}
	k2, r2, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Test})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := openStore(t, FileConfig{Path: path})
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2", s.Len())
	}

	if _, err := admin.Revoke(ctx, r2.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "revocation seen", func() bool {
		r, ok := found(s, k2)
		return ok && r.StateAt(now) == Revoked
	})

	k3, r3, err := admin.Rotate(ctx, r1.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// A reload applies its changes key by key to the live index (a change
	// costs O(changes), not a copy of the key set): a reader may see the
	// new key a moment before the old one is marked rotated. Wait for both.
	eventually(t, "replacement key found and the old key rotated", func() bool {
		_, ok3 := found(s, k3)
		r, ok1 := found(s, k1)
		return ok3 && ok1 && r.Status == Rotated
	})
	old, ok := found(s, k1)
	if !ok || old.Status != Rotated || old.StateAt(now) != Active || old.StateAt(now.Add(time.Hour+time.Second)) != Expired {
		t.Errorf("old key after rotation with grace = %+v", old)
	}
	// The store serves what the request path reads; who replaced a key
	// is the admin side's to show.
	if got := replacedBy(t, admin, r1.ID); got != r3.ID {
		t.Errorf("old key replaced by %q, want %q", got, r3.ID)
	}
	if r3.Context != ctxA || r3.Product != Extraction || r3.Env != Live {
		t.Errorf("replacement = %+v", r3)
	}

	k4, r4, err := admin.Rotate(ctx, r3.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "rotation without grace revokes at once", func() bool {
		r, ok := found(s, k3)
		_, ok4 := found(s, k4)
		return ok && ok4 && r.StateAt(now) == Revoked
	})
	if got := replacedBy(t, admin, r3.ID); got != r4.ID {
		t.Errorf("rotated key replaced by %q, want %q", got, r4.ID)
	}
}

func replacedBy(t *testing.T, admin *FileAdmin, id string) string {
	t.Helper()
	recs, err := admin.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == id {
			return r.ReplacedBy
		}
	}
	t.Fatalf("no record %s", id)
	return ""
}

func TestFileStoreKeepsLastGoodKeystore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	admin := &FileAdmin{Path: path}
	ctx := context.Background()
	key, _, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Live})
	if err != nil {
		t.Fatal(err)
	}
	s, reloads := openStore(t, FileConfig{Path: path})
	<-reloads // the first load

	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{"not YAML", "version: 1\nkeys: [ {id: \n", "keystore file"},
		{"wrong version", "version: 2\nkeys: []\n", "version: must be 1"},
		{"unknown field", "version: 1\nkeys: []\nextra: 1\n", "extra"},
		{"duplicate id", dupFile(t), "keys[1]: duplicate id key_0000000000000001"},
	}
	for _, tc := range tests {
		// Not parallel: one file, one store.
		if err := writeFileAtomic(path, []byte(tc.content)); err != nil {
			t.Fatal(err)
		}
		// Wait for the reload of this content (an earlier write may be
		// reported twice: once by the watch, once by the poll).
		nextReload(t, reloads, fmt.Sprintf("%s: OnReload with an error containing %q", tc.name, tc.wantErr), func(r reload) bool {
			if r.err == nil {
				t.Fatalf("%s: OnReload reported success", tc.name)
			}
			if r.keys != 1 {
				t.Errorf("%s: OnReload reports %d keys served, want the last good 1", tc.name, r.keys)
			}
			return strings.Contains(r.err.Error(), tc.wantErr)
		})
		if _, ok := found(s, key); !ok || s.Len() != 1 || !s.Ready() {
			t.Errorf("%s: last good keystore not serving", tc.name)
		}
		// An admin refuses to overwrite a file it cannot read.
		if _, _, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Live}); err == nil {
			t.Errorf("%s: Issue over a corrupt file succeeded", tc.name)
		}
	}

	// A good file is picked up again; deleting it then leaves it serving
	// (see TestFileStoreNeverShrinksToNothing).
	if err := writeFileAtomic(path, []byte(dupFreeFile(t))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "good file reloaded", func() bool { _, ok := found(s, key); return !ok && s.Len() == 1 })
	key2, _, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Live})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "key found after recovery", func() bool { _, ok := found(s, key2); return ok })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	nextReload(t, reloads, "a failed reload for the deleted file", func(r reload) bool {
		return r.err != nil && errors.Is(r.err, ErrKeystoreVanished)
	})
	if _, ok := found(s, key2); !ok || s.Len() != 2 {
		t.Errorf("deleted file: key found %v, %d keys; want the last good 2 serving", ok, s.Len())
	}
}

// nextReload waits up to within for a reload that ok accepts, passing over
// the others (one write may be reported twice: by the watch and by the
// poll), and returns it; what names the awaited reload in the failure.
func nextReload(t *testing.T, reloads <-chan reload, what string, ok func(reload) bool) reload {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case r := <-reloads:
			if ok(r) {
				return r
			}
		case <-timeout:
			t.Fatalf("no %s within %s", what, within)
			return reload{}
		}
	}
}

// dupFreeFile is a keystore file with one valid record.
func dupFreeFile(t testing.TB) string {
	data, err := MarshalFile([]Record{validRecord(t)})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestFileStoreNeverShrinksToNothing: once keys were served, a keystore
// file emptied in place, reduced to whitespace or to no keys, truncated or
// deleted is a failed reload: the last good keystore keeps serving, the
// failure is logged at error and reported to OnReload. A good file after
// it is picked up.
func TestFileStoreNeverShrinksToNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	admin := &FileAdmin{Path: path}
	ctx := context.Background()
	var keys []string
	for i := 0; i < 3; i++ {
		k, _, err := admin.Issue(ctx, IssueRequest{Product: Extraction, Env: Live, Context: ctxA, Name: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	reloads := make(chan reload, 100)
	s, err := OpenFile(FileConfig{Path: path, Logger: zap.New(core), OnReload: func(n int, err error) {
		select {
		case reloads <- reload{n, err}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	<-reloads

	inPlace := func(b []byte) func() error { return func() error { return os.WriteFile(path, b, 0o600) } }
	cases := []struct {
		name   string
		change func() error
	}{
		{"emptied in place", inPlace(nil)},
		{"whitespace only", inPlace([]byte("\n   \n\n"))},
		{"no keys", inPlace([]byte("version: 1\nkeys: []\n"))},
		{"truncated", inPlace(good[:len(good)/2])},
		{"truncated inside the last record", inPlace(good[:len(good)-12])},
		{"deleted", func() error { return os.Remove(path) }},
	}
	for _, c := range cases {
		// Start each case from the good file, served.
		if err := writeFileAtomic(path, good); err != nil {
			t.Fatal(err)
		}
		eventually(t, c.name+": good file served", func() bool { return s.Len() == 3 })
		drain(reloads)
		logs.TakeAll()
		if err := c.change(); err != nil {
			t.Fatal(err)
		}
		got := nextReload(t, reloads, c.name+": a failed reload", func(r reload) bool {
			if r.err == nil && s.Len() != 3 {
				t.Fatalf("%s: reloaded as ok with %d keys", c.name, s.Len())
			}
			return r.err != nil
		})
		if got.keys != 3 {
			t.Errorf("%s: OnReload reports %d keys served, want the last good 3", c.name, got.keys)
		}
		for _, k := range keys {
			if _, ok := found(s, k); !ok {
				t.Errorf("%s: a key stopped working", c.name)
			}
		}
		errs := logs.FilterLevelExact(zap.ErrorLevel).FilterMessageSnippet("reload failed").All()
		if len(errs) == 0 {
			t.Errorf("%s: not logged at error; logs: %v", c.name, logs.All())
		}
	}
	// And back: a good file with one more key is served.
	if err := writeFileAtomic(path, good); err != nil {
		t.Fatal(err)
	}
	k4, _, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Live})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "good file after the failures", func() bool { _, ok := found(s, k4); return ok && s.Len() == 4 })
}

func drain(ch chan reload) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// dupFile is a keystore file whose second entry repeats the first one's id.
func dupFile(t testing.TB) string {
	a, b := validRecord(t), validRecord(t)
	a.ID, b.ID = "key_0000000000000001", "key_0000000000000001"
	data, err := MarshalFile([]Record{a, b})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestOpenFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		cfg     FileConfig
		wantErr string
	}{
		{"no path", FileConfig{}, "keystore: FileConfig.Path: required"},
		{"corrupt file", FileConfig{Path: write("bad.yaml", "{{{")}, "bad.yaml"},
		{"duplicate id", FileConfig{Path: write("dup.yaml", dupFile(t))}, "keys[1]: duplicate id key_0000000000000001"},
		{"missing version", FileConfig{Path: write("nover.yaml", "keys: []\n")}, "version: must be 1"},
		{"a directory", FileConfig{Path: dir}, "keystore file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := OpenFile(tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("OpenFile succeeded")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("OpenFile = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	// An empty file is an empty keystore.
	s, err := OpenFile(FileConfig{Path: write("empty.yaml", "\n")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Ready() || s.Len() != 0 {
		t.Error("empty file is not a ready, empty keystore")
	}
}

func TestFileHoldsNoKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "keys.yaml")
	admin := &FileAdmin{Path: path}
	ctx := context.Background()
	var keys []string
	for i := range 4 {
		k, r, err := admin.Issue(ctx, IssueRequest{Product: Extraction, Env: Env([]string{"live", "test"}[i%2]), Context: ctxA, Name: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		if i == 3 {
			k, _, err := admin.Rotate(ctx, r.ID, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if bytes.Contains(data, []byte(k)) || bytes.Contains(data, []byte(k[prefixLen:prefixLen+RandomLen])) {
			t.Fatal("the keystore file contains an issued key")
		}
		if !bytes.Contains(data, []byte(HashKey(k).String())) {
			t.Errorf("the keystore file lacks the hash of an issued key")
		}
	}
	for _, p := range []string{path, path + ".lock"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory: %v, %v; want mode 0700", fi.Mode().Perm(), err)
	}
	// No temp files are left behind.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 2 {
		t.Errorf("directory holds %d entries, want the file and its lock", len(ents))
	}
	recs, err := admin.List(ctx)
	if err != nil || len(recs) != 5 {
		t.Fatalf("List = %d records, %v", len(recs), err)
	}
	for i, r := range recs[:4] {
		if r.Name != fmt.Sprint("k", i) {
			t.Errorf("List order: record %d is %q", i, r.Name)
		}
	}
}

func TestConcurrentIssueLosesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	ctx := context.Background()
	const workers, each = 6, 5
	var mu sync.Mutex
	issued := map[string]string{} // id -> key
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			admin := &FileAdmin{Path: path} // one admin each, as separate processes would have
			for range each {
				k, r, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Test})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				issued[r.ID] = k
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	recs, err := (&FileAdmin{Path: path}).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != workers*each || len(issued) != workers*each {
		t.Fatalf("file holds %d records, %d issued; want %d", len(recs), len(issued), workers*each)
	}
	for _, r := range recs {
		if k, ok := issued[r.ID]; !ok || HashKey(k) != r.Hash {
			t.Errorf("record %s does not match an issued key", r.ID)
		}
	}
}

func TestAdminErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	admin := &FileAdmin{Path: path}
	ctx := context.Background()

	if recs, err := admin.List(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("List of absent file = %v, %v", recs, err)
	}
	if _, _, err := admin.Issue(ctx, IssueRequest{Product: Extraction, Env: Live}); err == nil || !strings.Contains(err.Error(), "context: required") {
		t.Fatalf("Issue without context = %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused Issue created the file")
	}
	if _, err := admin.Revoke(ctx, "key_nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Revoke unknown = %v", err)
	}
	if _, _, err := admin.Rotate(ctx, "key_nope", time.Hour); !errors.Is(err, ErrNotFound) {
		t.Errorf("Rotate unknown = %v", err)
	}
	_, r, err := admin.Issue(ctx, IssueRequest{Product: Registry, Env: Live})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.Rotate(ctx, r.ID, -time.Second); err == nil {
		t.Error("Rotate with negative grace succeeded")
	}
	_, r2, err := admin.Rotate(ctx, r.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.Rotate(ctx, r.ID, time.Hour); !errors.Is(err, ErrRotated) {
		t.Errorf("second Rotate = %v, want ErrRotated", err)
	}
	// A rotated key in grace may still be revoked to end the grace at once.
	if rev, err := admin.Revoke(ctx, r.ID); err != nil || rev.Status != Revoked || rev.RevokedAt.IsZero() {
		t.Errorf("Revoke rotated key = %+v, %v", rev, err)
	}
	if _, err := admin.Revoke(ctx, r.ID); !errors.Is(err, ErrRevoked) {
		t.Errorf("second Revoke = %v, want ErrRevoked", err)
	}
	if _, _, err := admin.Rotate(ctx, r.ID, time.Hour); !errors.Is(err, ErrRevoked) {
		t.Errorf("Rotate revoked = %v, want ErrRevoked", err)
	}
	recs, err := admin.List(ctx)
	if err != nil || len(recs) != 2 || recs[1].ID != r2.ID {
		t.Errorf("List = %+v, %v", recs, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := admin.List(cancelled); err == nil {
		t.Error("List with a cancelled context succeeded")
	}
	if _, _, err := (&FileAdmin{}).Issue(ctx, IssueRequest{Product: Registry, Env: Live}); err == nil {
		t.Error("FileAdmin without Path succeeded")
	}
}

func TestLockHonoursContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.yaml")
	unlock, err := lockFile(context.Background(), path+".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := (&FileAdmin{Path: path}).Issue(ctx, IssueRequest{Product: Registry, Env: Live}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Issue while locked = %v, want deadline exceeded", err)
	}
}

func TestFileRoundTrip(t *testing.T) {
	t.Parallel()
	a := validRecord(t)
	_, old, repl, err := RotateRecord(validRecord(t), t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	in := []Record{a, old, repl}
	data, err := MarshalFile(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"version: 1", "id:", "hash: sha256:", "product: extraction", "env: live", "context: " + ctxA, "created_at:", "expires_at:", "status: rotated", "replaced_by: " + repl.ID} {
		if !bytes.Contains(data, []byte(f)) {
			t.Errorf("file lacks %q:\n%s", f, data)
		}
	}
	out, err := ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d records back, want %d", len(out), len(in))
	}
	for i := range in {
		if !recordsEqual(in[i], out[i]) {
			t.Errorf("record %d: %+v, want %+v", i, out[i], in[i])
		}
	}
}

func recordsEqual(a, b Record) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Hash == b.Hash && a.Product == b.Product && a.Env == b.Env &&
		a.Context == b.Context && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.Status == b.Status && a.RevokedAt.Equal(b.RevokedAt) && a.ReplacedBy == b.ReplacedBy
}

// FuzzParseFile checks that no keystore file bytes make ParseFile panic, and
// that whatever it accepts is valid and survives a write and a re-read.
func FuzzParseFile(f *testing.F) {
	good, err := MarshalFile([]Record{validRecord(f)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(dupFile(f)))
	f.Add([]byte(""))
	f.Add([]byte("version: 1\nkeys: []\n"))
	f.Add([]byte("version: 1\nkeys:\n  - id: a\n    hash: sha256:" + strings.Repeat("ab", 32) + "\n    product: registry\n    env: test\n    status: active\n"))
	f.Add([]byte("version: 1\nkeys: &a [*a]\n"))
	f.Add([]byte("- - - -\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ParseFile(data)
		if err != nil {
			return
		}
		if err := ValidateRecords(recs); err != nil {
			t.Fatalf("ParseFile accepted invalid records: %v", err)
		}
		out, err := MarshalFile(recs)
		if err != nil {
			t.Fatalf("MarshalFile of accepted records: %v", err)
		}
		back, err := ParseFile(out)
		if err != nil {
			t.Fatalf("re-reading a written file: %v\n%s", err, out)
		}
		if len(back) != len(recs) {
			t.Fatalf("%d records after a round trip, want %d", len(back), len(recs))
		}
		for i := range recs {
			if !recordsEqual(recs[i], back[i]) {
				t.Fatalf("record %d changed in a round trip: %+v -> %+v", i, recs[i], back[i])
			}
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	path := filepath.Join(b.TempDir(), "keys.yaml")
	recs := make([]Record, 0, 10000)
	var key string
	for i := range cap(recs) {
		k, r, err := NewRecord(IssueRequest{Product: Registry, Env: Live}, t0)
		if err != nil {
			b.Fatal(err)
		}
		r.ID = fmt.Sprintf("key_%016x", i)
		recs = append(recs, r)
		key = k
	}
	data, err := MarshalFile(recs)
	if err != nil {
		b.Fatal(err)
	}
	if err := writeFileAtomic(path, data); err != nil {
		b.Fatal(err)
	}
	s, err := OpenFile(FileConfig{Path: path, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok, _ := s.Lookup(ctx, HashKey(key)); !ok {
				b.Fatal("not found")
			}
		}
	})
}

func TestParseFileLowerCasesContext(t *testing.T) {
	t.Parallel()
	r := validRecord(t)
	r.Context = strings.ToUpper(ctxA)
	data, err := MarshalFile([]Record{r})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ParseFile(data)
	if err != nil || len(recs) != 1 || recs[0].Context != ctxA {
		t.Fatalf("ParseFile = %+v, %v; want the context in lower case", recs, err)
	}
}
