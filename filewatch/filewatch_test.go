package filewatch_test

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/filewatch"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// A file replaced by rename, written in place, created in a directory
// that appears later, or removed is noticed: through events, or by the
// poll alone.
func TestWatcherSeesChanges(t *testing.T) {
	for _, noEvents := range []bool{false, true} {
		name := "events"
		if noEvents {
			name = "poll only"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			file := filepath.Join(dir, "later", "keys.yaml")
			var calls atomic.Int32
			w := filewatch.Start(filewatch.Config{Paths: []string{file}, Poll: 50 * time.Millisecond, NoEvents: noEvents, OnChange: func() { calls.Add(1) }})
			defer w.Close()
			steps := []struct {
				what string
				do   func()
			}{
				{"created in a new directory", func() {
					_ = os.MkdirAll(filepath.Dir(file), 0o755)
					_ = os.WriteFile(file, []byte("a"), 0o600)
				}},
				{"replaced by rename", func() {
					tmp := file + ".tmp"
					_ = os.WriteFile(tmp, []byte("bb"), 0o600)
					_ = os.Rename(tmp, file)
				}},
				{"written in place", func() { _ = os.WriteFile(file, []byte("ccc"), 0o600) }},
				{"removed", func() { _ = os.Remove(file) }},
			}
			for _, s := range steps {
				n := calls.Load()
				s.do()
				testkit.Eventually(t, testkit.HangCheck, s.what, func() error { return testkit.True(calls.Load() > n, "%d calls, want more than %d", calls.Load(), n) })
			}
		})
	}
}

// Another file in the same directory is not a change; Close stops the
// calls.
func TestWatcherIgnoresOtherFilesAndStops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "cert.pem")
	_ = os.WriteFile(file, []byte("x"), 0o600)
	var calls atomic.Int32
	w := filewatch.Start(filewatch.Config{Paths: []string{file}, Poll: 20 * time.Millisecond, OnChange: func() { calls.Add(1) }})
	_ = os.WriteFile(filepath.Join(dir, "other"), []byte("y"), 0o600)
	time.Sleep(200 * time.Millisecond) // ten polls and any event's settling
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d calls for another file", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(file, []byte("changed"), 0o600)
	time.Sleep(100 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d calls after Close", n)
	}
}

// A change made after the caller's Baseline and before Start is noticed.
func TestWatcherBaseline(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "keys.yaml")
	_ = os.WriteFile(file, []byte("a"), 0o600)
	base := filewatch.StatOf(file)
	_ = os.WriteFile(file, []byte("changed before Start"), 0o600)
	var calls atomic.Int32
	w := filewatch.Start(filewatch.Config{Paths: []string{file}, Poll: 20 * time.Millisecond, NoEvents: true,
		Baseline: []filewatch.Stat{base}, OnChange: func() { calls.Add(1) }})
	defer w.Close()
	testkit.Eventually(t, testkit.HangCheck, "the change before Start", func() error {
		return testkit.True(calls.Load() > 0, "no call")
	})
}
