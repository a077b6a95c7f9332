package atomicfile_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/keygate/keygate/internal/atomicfile"
)

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name    string
		old     string // "" for no file before
		data    string
		perm    os.FileMode
		want    string
		wantErr bool
	}{
		{name: "new file", data: "a: 1\n", perm: 0o600, want: "a: 1\n"},
		{name: "replaces a file", old: "old\n", data: "new\n", perm: 0o600, want: "new\n"},
		{name: "a certificate's mode", data: "cert\n", perm: 0o644, want: "cert\n"},
		{name: "empty data", old: "old\n", data: "", perm: 0o600, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "keys.yaml")
			if tc.old != "" {
				if err := os.WriteFile(path, []byte(tc.old), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := atomicfile.WriteFile(path, []byte(tc.data), tc.perm)
			if (err != nil) != tc.wantErr {
				t.Fatalf("WriteFile: %v, want error %v", err, tc.wantErr)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("file holds %q, want %q", got, tc.want)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.wantErr && runtime.GOOS != "windows" && st.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.perm)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("the directory holds %v, want the file alone (no temp file left)", names)
			}
		})
	}
}

// TestWriteFileFailureLeavesNoTemp: a write that fails after its temp
// file was made (here its rename, over a directory) removes the temp
// file and leaves what was at the path.
func TestWriteFileFailureLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "inside"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(path, []byte("x"), 0o600); err == nil {
		t.Fatal("WriteFile over a directory that is not empty: nil, want an error")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !entries[0].IsDir() {
		t.Errorf("the directory holds %d entries, want the directory alone", len(entries))
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "gone", "keys.yaml"), []byte("x"), 0o600); err == nil {
		t.Error("WriteFile into a directory that is not there: nil, want an error")
	}
}

// TestSyncDir: on a file system that refuses to sync a directory
// (EINVAL, as procfs does, and some network and container mounts), a
// write must not fail, or every write there would; a directory that is
// not there is an error.
func TestSyncDir(t *testing.T) {
	if err := atomicfile.SyncDir(t.TempDir()); err != nil {
		t.Errorf("SyncDir of a directory: %v", err)
	}
	if runtime.GOOS == "linux" {
		if err := atomicfile.SyncDir("/proc/self"); err != nil {
			t.Errorf("SyncDir of a directory that cannot be synced: %v, want nil", err)
		}
	}
	if runtime.GOOS != "windows" {
		if err := atomicfile.SyncDir(filepath.Join(t.TempDir(), "gone")); err == nil {
			t.Error("SyncDir of a missing directory: nil, want its error")
		}
	}
}
