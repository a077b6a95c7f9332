package usage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

var _ Syncer = (*FileStore)(nil)

var journalNow = time.Date(2026, 11, 24, 10, 30, 0, 0, time.UTC)

// admitted is what a reader of path (a process of its own, as the CLI
// is) reads as id's admitted requests in the last hour.
func admitted(t testing.TB, path, id string) int64 {
	t.Helper()
	c, _, err := (&FileStore{Path: path}).Read(context.Background(), []string{id}, time.Hour, journalNow)
	if err != nil {
		t.Fatal(err)
	}
	return c.Admitted
}

func flushN(t testing.TB, s *FileStore, id string, n int64) {
	t.Helper()
	if err := s.Flush(context.Background(), []Delta{{ID: id, Counts: Counts{Admitted: n}, LastUsed: journalNow, APIKey: n, LastAPIKey: journalNow}}, journalNow); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFileStoreFlushIsOnDiskAtOnce: every flush is on disk when Flush
// returns, for a reader in another process (the CLI), and it costs a
// line in the journal: the snapshot of the other keys is not written
// again.
func TestFileStoreFlushIsOnDiskAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
	s := &FileStore{Path: path}
	defer s.Close()
	var many []Delta
	for i := range 2000 {
		many = append(many, Delta{ID: fmt.Sprintf("key_%04d", i), Counts: Counts{Admitted: 1}, LastUsed: journalNow})
	}
	if err := s.Flush(context.Background(), many, journalNow); err != nil {
		t.Fatal(err)
	}
	snap := readFile(t, path)
	for i, want := range []int64{1, 3, 6} {
		flushN(t, s, "key_a", int64(i+1))
		if got := admitted(t, path, "key_a"); got != want {
			t.Errorf("after flush %d another reader read %d admitted, want %d", i+1, got, want)
		}
	}
	if !bytes.Equal(readFile(t, path), snap) {
		t.Error("the snapshot was written again for a flush of one key")
	}
	lines := strings.Split(strings.TrimSuffix(string(readFile(t, path+".journal")), "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[3], `{"id":"key_a","hour":2026112410,"counts":{"admitted":3}`) {
		t.Errorf("journal %q: want its head and one line per flush of key_a", lines)
	}
	if got := admitted(t, path, "key_0042"); got != 1 {
		t.Errorf("a key of the snapshot read %d, want 1", got)
	}
}

// TestFileStoreRewritesWhenTheJournalOutgrowsTheSnapshot: a journal that
// would grow past the snapshot (and journalMin) is folded into a new
// snapshot; readers see the same counts before and after, none twice,
// whatever the flushes' sizes.
func TestFileStoreRewritesWhenTheJournalOutgrowsTheSnapshot(t *testing.T) {
	for _, min := range []int64{0, 600, 4 << 10} {
		t.Run(fmt.Sprintf("journalMin=%d", min), func(t *testing.T) {
			defer func(m int64) { journalMin = m }(journalMin)
			journalMin = min
			path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
			s := &FileStore{Path: path}
			defer s.Close()
			r := rand.New(rand.NewPCG(1, uint64(min)))
			want := map[string]int64{}
			rewrites, gen := 0, uint64(0)
			for range 200 {
				var ds []Delta
				for range 1 + r.IntN(8) {
					id := fmt.Sprintf("key_%d", r.IntN(30))
					n := int64(1 + r.IntN(5))
					want[id] += n
					ds = append(ds, Delta{ID: id, Counts: Counts{Admitted: n}, LastUsed: journalNow})
				}
				if err := s.Flush(context.Background(), ds, journalNow); err != nil {
					t.Fatal(err)
				}
				if s.gen != gen {
					rewrites, gen = rewrites+1, s.gen
				}
			}
			if rewrites < 2 {
				t.Errorf("%d rewrites in 200 flushes, want the journal folded in again and again", rewrites)
			}
			for id, n := range want {
				if got := admitted(t, path, id); got != n {
					t.Errorf("%s: another reader read %d, want %d", id, got, n)
				}
			}
			if st, err := os.Stat(path + ".journal"); err != nil || st.Size() > max(s.snapSize, journalMin) {
				t.Errorf("journal: %v, %d bytes beside a snapshot of %d", err, st.Size(), s.snapSize)
			}
		})
	}
}

// TestFileStoreReadsWhatACrashLeft: the files a crash leaves at any
// point read as the counts flushed, none twice; and the next owner
// carries on from them.
func TestFileStoreReadsWhatACrashLeft(t *testing.T) {
	tests := []struct {
		name string
		// crash changes the files of a store that flushed 1, 2 and 3
		// (key_a: 6) after its last rewrite.
		crash func(t *testing.T, s *FileStore)
		want  int64
	}{
		{"between flushes", func(t *testing.T, s *FileStore) {}, 6},
		{"in a flush's append: a line without its newline", func(t *testing.T, s *FileStore) {
			line := `{"id":"key_a","hour":2026112410,"counts":{"admitted":100}`
			if _, err := s.journal.Write([]byte(line)); err != nil {
				t.Fatal(err)
			}
		}, 6},
		{"in a rewrite, after the snapshot's rename, before the new journal", func(t *testing.T, s *FileStore) {
			if _, err := writeAtomic(osFS{}, s.Path, func(w io.Writer) error { return writeFileData(w, s.data, s.gen+1) }); err != nil {
				t.Fatal(err)
			}
		}, 6},
		{"in a rewrite, before the snapshot's rename", func(t *testing.T, s *FileStore) {
			if err := os.WriteFile(filepath.Join(filepath.Dir(s.Path), ".usage-123"), []byte(`{"buckets":{`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, 6},
		{"a power cut that kept neither file's data, only their names", func(t *testing.T, s *FileStore) {
			for _, p := range []string{s.Path, s.journalPath()} {
				if err := os.Truncate(p, 0); err != nil {
					t.Fatal(err)
				}
			}
		}, 0},
		{"a snapshot restored from an older backup, the journal newer", func(t *testing.T, s *FileStore) {
			if _, err := writeAtomic(osFS{}, s.Path, func(w io.Writer) error { return writeFileData(w, newUsageData(), s.gen-1) }); err != nil {
				t.Fatal(err)
			}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
			s := &FileStore{Path: path}
			flushN(t, s, "key_b", 1) // the first flush writes the snapshot
			for i := range 2 {       // and a second generation
				if err := s.rewrite(); err != nil {
					t.Fatal(i, err)
				}
			}
			for _, n := range []int64{1, 2, 3} {
				flushN(t, s, "key_a", n)
			}
			tt.crash(t, s)
			s.journal.Close() // the process is gone
			on, err := (&FileStore{Path: path}).read(nil)
			if err != nil {
				t.Fatal(err)
			}
			onDisk := max(on.gen, on.journalGen)

			if got := admitted(t, path, "key_a"); got != tt.want {
				t.Errorf("a reader read %d, want %d", got, tt.want)
			}
			next := &FileStore{Path: path}
			defer next.Close()
			flushN(t, next, "key_a", 10)
			if got := admitted(t, path, "key_a"); got != tt.want+10 {
				t.Errorf("after the next owner's flush a reader read %d, want %d", got, tt.want+10)
			}
			m, err := (&FileStore{Path: path}).Methods(context.Background(), []string{"key_a"}, time.Hour, journalNow)
			if err != nil || m["key_a"].APIKey != tt.want+10 {
				t.Errorf("counts by method: %+v, %v; want %d by API key", m, err, tt.want+10)
			}
			// It appends to the journal it read, if whole and of the
			// snapshot's generation; else it starts one past every
			// generation on disk, so that no crash can leave a snapshot
			// beside an older journal of the same generation.
			if want := onDisk + 1; on.appendable && next.gen != onDisk || !on.appendable && next.gen != want {
				t.Errorf("the next owner's generation %d, files' %d and %d (appendable %v)", next.gen, on.gen, on.journalGen, on.appendable)
			}
			jn, err := parseJournal(bufio.NewReader(bytes.NewReader(readFile(t, path+".journal"))))
			if err == nil {
				err = jn.replay(newUsageData(), nil)
			}
			if err != nil || jn.gen != next.gen || !jn.whole {
				t.Errorf("journal on disk: generation %d (whole %v, %v), want the owner's %d", jn.gen, jn.whole, err, next.gen)
			}
		})
	}
}

// TestFileStoreRefusesABadJournal: a complete line that no flush writes
// is an error that names the file and the line, for the owner and
// readers alike, never counts made up or a panic.
func TestFileStoreRefusesABadJournal(t *testing.T) {
	tests := []struct{ name, journal, want string }{
		{"no head", `{"id":"key_a","hour":2026112410,"counts":{}}` + "\n", "line 1"},
		{"generation 0", `{"journal_gen":0}` + "\n", "line 1"},
		{"not JSON", `{"journal_gen":1}` + "\n" + `{"id":` + "\n", "line 2"},
		{"no id", `{"journal_gen":1}` + "\n" + `{"hour":2026112410,"counts":{}}` + "\n", "line 2: no id"},
		{"an hour of 8 digits", `{"journal_gen":1}` + "\n" + `{"id":"key_a","hour":20261124,"counts":{}}` + "\n", "line 2: bad hour"},
		{"a day of 10 digits", `{"journal_gen":1}` + "\n" + `{"id":"key_a","hour":2026112410,"counts":{},"day":2026112410,"api_key":1}` + "\n", "line 2: bad day"},
		{"counts by method without a day", `{"journal_gen":1}` + "\n" + `{"id":"key_a","hour":2026112410,"counts":{},"bearer":1}` + "\n", "line 2: counts by method"},
		{"a negative hour", `{"journal_gen":1}` + "\n" + `{"id":"key_a","hour":-1,"counts":{}}` + "\n", "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
			if err := os.WriteFile(path, []byte(`{"buckets":{},"last_used_at":{},"journal_gen":1}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+".journal", []byte(tt.journal), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := (&FileStore{Path: path}).Read(context.Background(), []string{"key_a"}, time.Hour, journalNow)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path+".journal") {
				t.Errorf("reader: %v, want an error naming the journal and %q", err, tt.want)
			}
			s := &FileStore{Path: path}
			if err := s.Flush(context.Background(), []Delta{{ID: "key_a", Counts: Counts{Admitted: 1}}}, journalNow); err == nil {
				t.Error("the owner flushed over a bad journal")
			}
		})
	}
}

// TestFileStoreAppendFailure: a flush whose append fails keeps its
// counts, and the operator's log says so; the next flush, or the
// flusher's Close (Sync), writes them in a new snapshot, and a flush
// whose rewrite fails keeps them too.
func TestFileStoreAppendFailure(t *testing.T) {
	for _, then := range []string{"flush", "close"} {
		t.Run(then, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
			s := &FileStore{Path: path}
			defer s.Close()
			// The flusher flushes at the time it runs: so does this test.
			flush := func(n int64) {
				t.Helper()
				if err := s.Flush(context.Background(), []Delta{{ID: "key_a", Counts: Counts{Admitted: n}}}, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			flush(1)
			s.journal.Close() // its writes now fail, as on a full disk
			core, logs := observer.New(zap.WarnLevel)
			counters := NewCounters(0)
			f, err := NewFlusher(context.Background(), FlusherConfig{Counters: counters, Store: s, Interval: time.Hour, Logger: zap.New(core)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			counters.Record("key_a", ByAPIKey, Admitted, 10, time.Now())
			counters.Record("key_a", ByAPIKey, Admitted, 10, time.Now())
			f.Flush()
			if l := logs.TakeAll(); len(l) != 1 || l[0].Message != "usage flush not written; its counts are kept for the next" {
				t.Errorf("logged %v, want that the counts are kept", l)
			}
			want := int64(3)
			if then == "flush" {
				// The next flush must rewrite the snapshot, and fails
				// too while the directory is gone.
				dir := filepath.Dir(path)
				if err := os.Rename(dir, dir+".away"); err != nil {
					t.Fatal(err)
				}
				counters.Record("key_a", ByAPIKey, Admitted, 10, time.Now())
				f.Flush()
				if l := logs.TakeAll(); len(l) != 1 || l[0].Message != "usage flush not written; its counts are kept for the next" {
					t.Errorf("a failed rewrite logged %v, want that the counts are kept", l)
				}
				if err := os.Rename(dir+".away", dir); err != nil {
					t.Fatal(err)
				}
				flush(4)
				want = 8
			} else if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			c, _, err := (&FileStore{Path: path}).Read(context.Background(), []string{"key_a"}, 2*time.Hour, time.Now())
			if got := c.Admitted; err != nil || got != want {
				t.Errorf("a reader read %d (%v), want %d", got, err, want)
			}
			if l := logs.TakeAll(); len(l) != 0 {
				t.Errorf("logged %v after the counts were written", l)
			}
		})
	}
}

// TestFileStoreReaderDuringRewrites: a reader that reads while the owner
// flushes and rewrites (the CLI beside a busy gateway) never reads a
// count twice, nor fewer than it read before.
func TestFileStoreReaderDuringRewrites(t *testing.T) {
	defer func(m int64) { journalMin = m }(journalMin)
	journalMin = 0
	path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
	s := &FileStore{Path: path}
	defer s.Close()
	flushN(t, s, "key_a", 1)
	const flushes = 300
	errs := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		defer close(errs)
		for i := 2; i <= flushes; i++ {
			for _, id := range []string{"key_a", fmt.Sprintf("key_%d", i)} { // the snapshot grows
				select {
				case <-stop:
					return
				default:
				}
				if err := s.Flush(context.Background(), []Delta{{ID: id, Counts: Counts{Admitted: 1}}}, journalNow); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-errs }()
	last := int64(0)
	for last < flushes {
		got := admitted(t, path, "key_a")
		if got < last || got > flushes {
			t.Fatalf("a reader read %d after %d, want between that and %d", got, last, flushes)
		}
		last = got
	}
}

// FuzzJournalLine: a flush's line, for any id and counts, reads back as
// the same merge.
func FuzzJournalLine(f *testing.F) {
	f.Add("key_0123", int64(3), int64(900), int64(3), int64(0), int64(1))
	f.Add("\"\\\x00\u2028", int64(-1), int64(0), int64(0), int64(2), int64(0))
	f.Fuzz(func(t *testing.T, id string, admitted, bytesIn, apiKey, bearer, unixNano int64) {
		if id == "" {
			return
		}
		x := Delta{ID: id, Counts: Counts{Admitted: admitted, BytesIn: bytesIn}, APIKey: apiKey, Bearer: bearer,
			LastUsed: time.Unix(0, unixNano).UTC(), LastAPIKey: time.Unix(0, unixNano/2).UTC()}
		var j jsonWriter
		j.b = append(j.b, journalHead(7)...)
		j.journalLine(&x, 2026112410, 20261124)
		jn, err := parseJournal(bufio.NewReader(bytes.NewReader(j.b)))
		if err != nil || jn.gen != 7 {
			t.Fatalf("head: %+v, %v", jn, err)
		}
		got, want := newUsageData(), newUsageData()
		if err := jn.replay(got, nil); err != nil || !jn.whole {
			t.Fatalf("%v (whole %v) in %s", err, jn.whole, j.b)
		}
		want.add(&x, 2026112410, 20261124)
		for id, k := range want.keys { // as JSON reads back an id (each bad byte as U+FFFD)
			q, _ := json.Marshal(id)
			var back string
			if err := json.Unmarshal(q, &back); err != nil {
				t.Fatal(err)
			}
			delete(want.keys, id)
			want.keys[back] = k
		}
		if !reflect.DeepEqual(got.keys, want.keys) {
			t.Errorf("read back %+v, want %+v from %s", got.keys, want.keys, j.b)
		}
	})
}

// FuzzJournalRead: whatever bytes the journal holds, a reader gets
// counts or an error, never a panic.
func FuzzJournalRead(f *testing.F) {
	f.Add([]byte(`{"journal_gen":1}` + "\n" + `{"id":"key_a","hour":2026112410,"counts":{"admitted":1}}` + "\n"))
	f.Add([]byte(`{"journal_gen":1}` + "\n" + `{"id":"key_a","hour":2026112410,"counts":{"admitted":1},"day":20261124,"api_key":1,"bearer":0,"last_api_key_at":"2026-11-24T10:30:00Z"}`))
	f.Add([]byte("\n\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// A buffer of 16 bytes, the least bufio allows, reads lines
		// longer than itself as one of 1 MiB does.
		read := func(size int) (*usageData, *journal, error) {
			jn, err := parseJournal(bufio.NewReaderSize(bytes.NewReader(b), size))
			if err != nil {
				return nil, nil, err
			}
			d := newUsageData()
			return d, jn, jn.replay(d, nil)
		}
		small, sj, serr := read(16)
		large, lj, lerr := read(1 << 20)
		if (serr == nil) != (lerr == nil) {
			t.Fatalf("16-byte buffer: %v; 1 MiB: %v", serr, lerr)
		}
		if serr == nil && (sj.gen != lj.gen || sj.whole != lj.whole || sj.size != lj.size || !reflect.DeepEqual(small.keys, large.keys)) {
			t.Errorf("16-byte buffer read %+v %+v, 1 MiB %+v %+v", sj, small.keys, lj, large.keys)
		}
	})
}

// TestFileStoreReaderReadsItsKeys: a reader in another process (the
// CLI) reads only the keys it asks for, and gets for each what the
// owner holds, whether its counts are in the snapshot or the journal
// and whatever its id (a plain one is skipped unread in the journal,
// another read whole).
func TestFileStoreReaderReadsItsKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.yaml.usage.json")
	s := &FileStore{Path: path}
	defer s.Close()
	// The last id makes journal lines longer than a reader's buffer.
	ids := []string{"key_plain", `key_"quoted"`, "key_\u00e9", `key_\back`, "key_\x01", "key_plain_longer", "key_" + strings.Repeat("x", 100_000)}
	for i, id := range ids { // the snapshot
		if err := s.Flush(ctx, []Delta{{ID: id, Counts: Counts{Admitted: int64(i + 1)}, LastUsed: journalNow.Add(time.Duration(i) * time.Second), APIKey: 1, LastAPIKey: journalNow}}, journalNow); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.rewrite(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids { // and the journal, an hour later
		later := journalNow.Add(time.Hour)
		if err := s.Flush(ctx, []Delta{{ID: id, Counts: Counts{Admitted: int64(10 * (i + 1))}, LastUsed: later, Bearer: 2}}, later); err != nil {
			t.Fatal(err)
		}
	}
	now := journalNow.Add(time.Hour)
	for _, id := range ids {
		want, wantLast, err := s.Read(ctx, []string{id}, 3*time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		r := &FileStore{Path: path}
		got, gotLast, err := r.Read(ctx, []string{id}, 3*time.Hour, now)
		if err != nil || got != want || !reflect.DeepEqual(gotLast, wantLast) {
			t.Errorf("%q: a reader read %+v %v (%v), the owner holds %+v %v", id, got, gotLast, err, want, wantLast)
		}
		wantM, _ := s.Methods(ctx, []string{id}, 24*time.Hour, now)
		if gotM, err := r.Methods(ctx, []string{id}, 24*time.Hour, now); err != nil || !reflect.DeepEqual(gotM, wantM) {
			t.Errorf("%q: a reader read methods %+v (%v), the owner holds %+v", id, gotM, err, wantM)
		}
		f, err := r.read(idSet([]string{id}))
		if err != nil || len(f.data.keys) != 1 {
			t.Errorf("%q: a reader of one key held %d keys (%v)", id, len(f.data.keys), err)
		}
	}
}

// FuzzReadFileData: a reader of some ids reads a snapshot as
// json.Unmarshal reads it, those ids' part of it; it may read a
// document that json.Unmarshal refuses only for what it reads past.
func FuzzReadFileData(f *testing.F) {
	var ours bytes.Buffer
	d := newUsageData()
	d.add(&Delta{ID: "key_a", Counts: Counts{Admitted: 3}, LastUsed: journalNow, APIKey: 1, LastAPIKey: journalNow}, 2026112410, 20261124)
	d.add(&Delta{ID: "key_b", Counts: Counts{Rate: 1}, LastUsed: journalNow}, 2026112411, 20261124)
	if err := writeFileData(&ours, d, 4); err != nil {
		f.Fatal(err)
	}
	f.Add(ours.Bytes(), "key_a")
	f.Add([]byte(`{"buckets":null,"last_used_at":null}`), "key_a")
	f.Add([]byte(`{"BUCKETS":{"key_a":{"2026112410":{"admitted":1}}},"buckets":{"key_a":{"2026112411":{}}},"x":[1,{}]}`), "key_a")
	f.Add([]byte(`{"buckets":{"key_a":{},"key_a":{"2026112410":{"admitted":2}}},"journal_gen":2} `), "key_a")
	f.Add([]byte(`null`), "key_a")
	f.Add([]byte(`{"last_used_at":{"k\u0065y_a":"2026-11-24T10:30:00Z","key_b":5}}`), "key_a")
	f.Add([]byte("{\"last_used_at\":{\"key_\xff\xfe\":\"2026-11-24T10:30:00Z\"}}"), "key_\uFFFD\uFFFD")
	f.Add([]byte(`{"last_used_at":{"key_\ud800":"2026-11-24T10:30:00Z","key_\udc00\ud83d\ude00":"2026-11-24T10:30:00Z"}}`), "key_\uFFFD")
	f.Add([]byte(`{"LAST_USED_AT":{"key_a":"2026-11-24T10:30:00Z"},"last_used_at":null}`), "key_a")
	f.Add([]byte(`{"journal_gen":1e2,"journal_gen":-1}`), "key_a")
	f.Fuzz(func(t *testing.T, doc []byte, id string) {
		var whole fileData
		err := json.Unmarshal(doc, &whole)
		var wd *usageData
		if err == nil {
			wd, err = whole.compact()
		}
		for _, want := range []ids{idSet([]string{id}), nil} {
			gd, gen, gerr := readFileData(bytes.NewReader(doc), want)
			if err != nil {
				continue // json.Unmarshal refuses it; the reader may read past the part it refuses
			}
			if gerr != nil {
				t.Fatalf("json.Unmarshal reads %q, the reader of %v: %v", doc, want, gerr)
			}
			if gen != whole.JournalGen {
				t.Errorf("journal_gen %d, json.Unmarshal's %d", gen, whole.JournalGen)
			}
			if want != nil && len(gd.keys) > 1 {
				t.Errorf("the reader of %q kept %d keys", id, len(gd.keys))
			}
			for kid, wk := range wd.keys {
				if want.has(kid) && !sameUsage(gd.keys[kid], wk) {
					t.Errorf("%q in %q: read %+v, json.Unmarshal's %+v", kid, doc, gd.keys[kid], wk)
				}
			}
			for kid, gk := range gd.keys {
				if !sameUsage(gk, wd.keys[kid]) {
					t.Errorf("%q in %q: read %+v, json.Unmarshal's %+v", kid, doc, gk, wd.keys[kid])
				}
			}
		}
	})
}

// sameUsage compares two keys' usage, a key absent and a key with
// nothing being the same, and an empty list and none.
func sameUsage(a, b *keyUsage) bool {
	type usage struct {
		hours                []hourCounts
		days                 []dayCounts
		lastUsed, lastAPIKey time.Time
	}
	norm := func(k *keyUsage) usage {
		if k == nil {
			return usage{}
		}
		n := usage{days: k.days, lastUsed: k.lastUsed, lastAPIKey: k.lastAPIKey}
		for h, c := range k.hours.all() {
			n.hours = append(n.hours, hourCounts{h, c})
		}
		if len(n.days) == 0 {
			n.days = nil
		}
		return n
	}
	x, y := norm(a), norm(b)
	return reflect.DeepEqual(x.hours, y.hours) && reflect.DeepEqual(x.days, y.days) && x.lastUsed.Equal(y.lastUsed) && x.lastAPIKey.Equal(y.lastAPIKey) &&
		x.lastUsed.Location().String() == y.lastUsed.Location().String()
}
