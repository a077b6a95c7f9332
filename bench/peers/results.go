package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/keygate/keygate/bench/internal/benchproc"
)

// A run's tables are dated and name the build they measured, so they are
// kept apart from the docs, which carry no dated figures: -out TOPIC writes
// them to bench/results/<date>-<commit>-<topic>.md.

var (
	resultsTopic  = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	resultsCommit = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
)

// resultsPath is where -out TOPIC writes a run made on day (UTC) from
// commit: dir/<YYYY-MM-DD>-<commit7>-<topic>.md.
func resultsPath(dir string, day time.Time, commit, topic string) (string, error) {
	if !resultsTopic.MatchString(topic) {
		return "", fmt.Errorf("-out %q: a topic is lower-case words joined by hyphens (tls, keys-100k)", topic)
	}
	if !resultsCommit.MatchString(commit) {
		return "", fmt.Errorf("commit %q is not a git commit hash", commit)
	}
	name := fmt.Sprintf("%s-%s-%s.md", day.UTC().Format(time.DateOnly), commit[:7], topic)
	return filepath.Join(dir, name), nil
}

// resultsCommitOf is HEAD's hash in root, and whether the work tree has
// changes that the hash does not name.
func resultsCommitOf(root string) (string, bool, error) {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false, fmt.Errorf("-out needs keygate's git repository: %w", err)
	}
	st, _ := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), len(bytes.TrimSpace(st)) > 0, nil
}

// writeResults writes tables, the run's stdout, to -out TOPIC's file under
// the module root, headed by the command that made them and the build;
// it refuses to replace a file already there.
func writeResults(topic string, args []string, tables []byte, stderr io.Writer) error {
	root, err := benchproc.ModuleRoot()
	if err != nil {
		return err
	}
	commit, dirty, err := resultsCommitOf(root)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	p, err := resultsPath(filepath.Join(root, "bench", "results"), now, commit, topic)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# bench-peers: %s\n\n", topic)
	build := commit[:12]
	if dirty {
		build += " with uncommitted changes"
	}
	fmt.Fprintf(&b, "Run %s UTC, keygate at %s, `go run ./bench/peers %s`.\n\n", now.Format("2006-01-02 15:04"), build, strings.Join(args, " "))
	b.Write(tables)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: give -out another topic", p)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "bench-peers: wrote", p)
	return nil
}
