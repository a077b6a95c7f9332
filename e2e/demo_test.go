package e2e

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit"
)

// TestMakeRunDemo does what the README tells a newcomer: start keygate on
// its embedded defaults (what `make run` runs) and paste the two printed
// curl lines. The first must get 200 and the second 403.
func TestMakeRunDemo(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8443", "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9090"} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the demo's fixed port %s is taken on this machine: %v", addr, err)
		}
		l.Close()
	}
	dir := t.TempDir()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "README.md"), readme, 0o644)

	cmd := exec.Command(binary, "demo")
	cmd.Dir = dir
	stdout, _ := cmd.StdoutPipe()
	logs := &testkit.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("demo logs:\n%s", tail(logs.String(), 3000))
		}
	}()

	var curls []string
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timeout := time.After(30 * time.Second)
	for len(curls) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo stopped printing after %d curl lines", len(curls))
			}
			if s := strings.TrimSpace(l); strings.HasPrefix(s, "curl ") {
				curls = append(curls, s)
			}
		case <-timeout:
			t.Fatal("demo printed no curl lines within 30s")
		}
	}
	want := []string{"200", "403"}
	for i, line := range curls {
		var code string
		eventually(t, 15*time.Second, func() string {
			c := exec.Command("bash", "-c", line+" -s -o /dev/null -w '%{http_code}'")
			c.Dir = dir // where the newcomer stands: next to README.md
			out, _ := c.Output()
			code = string(out)
			if code != want[i] {
				return "curl line " + string(rune('1'+i)) + " got " + code + ", want " + want[i]
			}
			return ""
		})
	}
}
