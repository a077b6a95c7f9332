package benchproc

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildKeygateAt builds keygate as it was at git revision rev of the
// module's repository (a commit, a tag, a branch, HEAD~3…) into dir, and
// returns the binary and the commit's full hash. The commit's tree is
// taken with `git archive` and built on its own, so the work tree, its
// uncommitted changes and the repository's list of work trees are left as
// they are. The binary's `keygate version` is the commit's short hash.
func BuildKeygateAt(rev, dir string) (bin, commit string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", "", err
	}
	git := func(args ...string) *exec.Cmd {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		cmd.Stderr = new(strings.Builder)
		return cmd
	}
	parse := git("rev-parse", "--verify", "--end-of-options", rev+"^{commit}")
	out, err := parse.Output()
	if err != nil {
		return "", "", fmt.Errorf("revision %q: git rev-parse: %w: %s", rev, err, strings.TrimSpace(fmt.Sprint(parse.Stderr)))
	}
	commit = strings.TrimSpace(string(out))
	short := commit[:12]
	src := filepath.Join(dir, "keygate-"+short)
	archive := git("archive", "--format=tar", commit)
	r, err := archive.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	if err := archive.Start(); err != nil {
		return "", "", fmt.Errorf("git archive %s: %w", commit, err)
	}
	if err := untar(r, src); err != nil {
		_ = archive.Process.Kill()
		_ = archive.Wait()
		return "", "", fmt.Errorf("git archive %s: %w", commit, err)
	}
	if err := archive.Wait(); err != nil {
		return "", "", fmt.Errorf("git archive %s: %w: %s", commit, err, archive.Stderr)
	}
	bin = filepath.Join(dir, "keygate-"+short+".bin")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/keygate/keygate/cli.Version="+short, "-o", bin, "./cmd/keygate")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/keygate at %s: %w\n%s", short, err, out)
	}
	// The tree is no longer needed; the binary is.
	_ = os.RemoveAll(src)
	return bin, commit, nil
}

// untar writes the regular files and directories of a tar stream under
// dir, refusing a name that would land outside it.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q: outside the tree", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		// Symbolic links and the archive's global header are not part
		// of what builds keygate.
	}
}
