package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// podmanFlags are what this machine needs to run a container, found by
// trying (see deploy/README.md, "The image"):
//   - --runtime runc: the cgroup hierarchy is hybrid (v1 controllers and a
//     cgroup2 mount holding hugetlb), which crun, podman's default on
//     Debian, refuses ("cgroups in hybrid mode not supported");
//   - --ulimit nofile/nproc below the current limits: root here lacks
//     CAP_SYS_RESOURCE, and podman's defaults (raising both) are refused;
//   - --network host: keygate listens on loopback ports the test picks, so
//     no container network (netavark, slirp4netns) is involved.
var podmanFlags = []string{"--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=1024:1024", "--network", "host"}

func podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	return string(out), err
}

// TestImageRunsUnderPodman loads the OCI archive into podman, starts it
// with a configuration mounted at /etc/keygate, and sends /sync without a
// key: 401 in the spec's shape. The container runs as the image's
// non-root user and has no shell to exec.
func TestImageRunsUnderPodman(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman not found: `make deps` installs it (Debian packages podman and runc)")
	}
	archive := builtArchive(t)
	if out, err := podman(t, "load", "-i", archive); err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	image := "localhost/" + testRef
	t.Cleanup(func() { _, _ = podman(t, "rmi", "-f", image) })

	dir := t.TempDir()
	api, admin := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cfg := fmt.Sprintf(`server:
  listen: %q
  admin_listen: %q
tls:
  mode: "off"
upstreams:
  extraction: { targets: ["http://127.0.0.1:9"] }
  registry: { targets: ["http://127.0.0.1:9"] }
keystore:
  backend: file
  file: /etc/keygate/keys.yaml
`, api, admin)
	for name, body := range map[string]string{"keygate.yaml": cfg, "keys.yaml": "version: 1\nkeys: []\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("keygate-test-%d", os.Getpid())
	args := append([]string{"run", "-d", "--rm", "--name", name}, podmanFlags...)
	args = append(args, "-v", dir+":/etc/keygate:ro", image)
	if out, err := podman(t, args...); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := podman(t, "logs", name)
			t.Logf("container logs:\n%s", logs)
		}
		_, _ = podman(t, "rm", "-f", "-t", "0", name)
	})

	testkit.Eventually(t, 30*time.Second, "keygate ready in the container", func() error {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return testkit.Equal(resp.StatusCode, http.StatusOK)
	})
	resp, err := http.Post("http://"+api+"/sync", "multipart/form-data; boundary=x", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	testkit.AssertSpecError(t, resp.StatusCode, resp.Header, body.Bytes(), http.StatusUnauthorized, "API key missing")

	// The process's real and effective uid, read from the host.
	pid, err := podman(t, "inspect", "-f", "{{.State.Pid}}", name)
	if err != nil {
		t.Fatalf("podman inspect: %v %s", err, pid)
	}
	status, err := os.ReadFile("/proc/" + strings.TrimSpace(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "Uid:") || strings.HasPrefix(l, "Gid:") {
			if f := strings.Fields(l); len(f) < 3 || f[1] != "65532" || f[2] != "65532" {
				t.Errorf("keygate's process %s; want 65532 (non-root)", l)
			}
		}
	}
	if out, err := podman(t, "exec", name, "/bin/sh", "-c", "true"); err == nil {
		t.Errorf("/bin/sh ran in the container: %s", out)
	}
	var inspect []struct {
		Config struct{ User string }
	}
	out, err := podman(t, "inspect", name)
	if err != nil || json.Unmarshal([]byte(out), &inspect) != nil || len(inspect) != 1 || inspect[0].Config.User != "65532:65532" {
		t.Errorf("podman inspect: user %v (%v)", inspect, err)
	}
}
