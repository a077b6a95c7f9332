package benchproc

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildKeygateAt builds keygate at HEAD~1 (HEAD in a one-commit
// clone) from the repository's history, leaving the work tree alone: the
// binary says it is that commit, and a revision that names no commit is
// refused with its name.
func TestBuildKeygateAt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds keygate")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "--verify", "HEAD").Run(); err != nil {
		t.Skip("not a git repository")
	}
	rev := "HEAD~1"
	if exec.Command("git", "-C", root, "rev-parse", "--verify", rev+"^{commit}").Run() != nil {
		rev = "HEAD"
	}
	want, err := exec.Command("git", "-C", root, "rev-parse", rev).Output()
	if err != nil {
		t.Fatal(err)
	}
	status := func() string {
		out, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
		return string(out)
	}
	before := status()
	dir := t.TempDir()
	bin, commit, err := BuildKeygateAt(rev, dir)
	if err != nil {
		t.Fatal(err)
	}
	if commit != strings.TrimSpace(string(want)) {
		t.Errorf("commit %s, want %s", commit, want)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v: %s", bin, err, out)
	}
	if got := strings.TrimSpace(string(out)); !strings.Contains(got, commit[:12]) {
		t.Errorf("keygate version = %q, want %s", got, commit[:12])
	}
	if after := status(); after != before {
		t.Errorf("the work tree changed:\n%s\nbefore:\n%s", after, before)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left in dir: %v, want the binary alone", entries)
	}
	if _, _, err := BuildKeygateAt("no-such-revision-xyz", dir); err == nil || !strings.Contains(err.Error(), "no-such-revision-xyz") {
		t.Errorf("a revision that names nothing: %v", err)
	}
}

// TestUntarStaysInside: an archive entry whose name leads out of the
// tree is refused; the others land where their names say.
func TestUntarStaysInside(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"go.mod", true},
		{"cmd/keygate/main.go", true},
		{"../escape", false},
		{"a/../../escape", false},
		{"/etc/passwd", false},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: tc.name, Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("hi"))
		_ = tw.Close()
		dir := t.TempDir()
		err := untar(&buf, filepath.Join(dir, "tree"))
		if tc.ok != (err == nil) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.ok {
			if b, err := os.ReadFile(filepath.Join(dir, "tree", tc.name)); err != nil || string(b) != "hi" {
				t.Errorf("%s: %q %v", tc.name, b, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "escape")); err == nil {
			t.Errorf("%s: wrote outside the tree", tc.name)
		}
	}
}
