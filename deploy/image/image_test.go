package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The image is built once for the tests, as an OCI archive.
var (
	buildOnce   sync.Once
	archivePath string
	buildErr    error
)

// testRef is the archive's image name: unique, so parallel runs on one
// machine do not share a podman image.
var testRef = fmt.Sprintf("keygate:1.2.3-test-%d", os.Getpid())

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Building and running the image takes minutes; `make check` is
		// the quick loop, `make test` runs them.
		fmt.Println("deploy/image: skipped in -short mode (make test runs it)")
		os.Exit(0)
	}
	code := m.Run()
	if archivePath != "" {
		os.RemoveAll(filepath.Dir(archivePath))
	}
	os.Exit(code)
}

func builtArchive(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		img, err := Build(Options{ModuleDir: "../..", Version: "v1.2.3-test", Revision: "0123abc"})
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "keygate-image-test-")
		if err != nil {
			buildErr = err
			return
		}
		archivePath = filepath.Join(dir, "keygate.oci.tar")
		buildErr = WriteOCIArchive(img, testRef, archivePath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return archivePath
}

// readArchive unpacks an OCI archive and returns its one image.
func readArchive(t *testing.T, path string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testRef {
		t.Fatalf("index %+v: want one image named %s", m.Manifests, testRef)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageIsMinimalAndNonRoot builds the OCI archive and inspects it as
// a registry or a runtime would: its config (user, entrypoint, ports,
// labels) and every file of every layer (no shell, nothing but the
// binary, CA certificates and the user's files).
func TestImageIsMinimalAndNonRoot(t *testing.T) {
	img := readArchive(t, builtArchive(t))
	mt, _ := img.MediaType()
	if mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %s, want OCI", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/keygate"}) || !slices.Equal(c.Cmd, []string{"serve", "--config", "/etc/keygate/keygate.yaml"}) {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	ports := slices.Sorted(func(yield func(string) bool) {
		for p := range c.ExposedPorts {
			if !yield(p) {
				return
			}
		}
	})
	if !slices.Equal(ports, []string{"8443/tcp", "9090/tcp"}) {
		t.Errorf("exposed ports %v, want 8443/tcp (API) and 9090/tcp (admin)", ports)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "v1.2.3-test",
		"org.opencontainers.image.revision": "0123abc",
		"org.opencontainers.image.source":   "https://github.com/keygate/keygate",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    "keygate",
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	var binary []byte
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
			files[name] = h
			base := filepath.Base(name)
			if slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox", "apt", "apk", "dpkg"}, base) || strings.HasPrefix(name, "bin") || strings.HasPrefix(name, "usr") {
				t.Errorf("layer %d holds %s: the image must have no shell and no package manager", i, h.Name)
			}
			if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
				t.Errorf("layer %d: link %s -> %s", i, h.Name, h.Linkname)
			}
			if h.Mode&0o6000 != 0 {
				t.Errorf("layer %d: %s is setuid/setgid", i, h.Name)
			}
			if name == "keygate" {
				binary, _ = io.ReadAll(tr)
			}
		}
		rc.Close()
	}
	want := []string{"etc", "etc/group", "etc/keygate", "etc/passwd", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt",
		"home", "home/nonroot", "keygate", "tmp", "var", "var/lib", "var/lib/keygate"}
	got := slices.Sorted(func(yield func(string) bool) {
		for f := range files {
			if !yield(f) {
				return
			}
		}
	})
	if !slices.Equal(got, want) {
		t.Errorf("files %v, want exactly %v", got, want)
	}
	if h := files["var/lib/keygate"]; h == nil || h.Uid != 65532 || h.Gid != 65532 {
		t.Errorf("/var/lib/keygate (certificates, spool, file keystore) must belong to 65532: %+v", h)
	}
	if h := files["etc/ssl/certs/ca-certificates.crt"]; h == nil || h.Size < 1000 {
		t.Errorf("CA certificates missing or empty: %+v", h)
	}
	// A static binary: no program interpreter, so nothing else is needed.
	e, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatalf("/keygate is not an ELF binary: %v", err)
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/keygate is dynamically linked (has PT_INTERP); the empty base has no libc")
		}
	}
	if libs, _ := e.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("/keygate links %v", libs)
	}
}

// TestDockerfileDeclaresTheSameImage: deploy/Dockerfile (for Docker and
// BuildKit users; no daemon runs here to build it) declares what the Go
// builder makes: the final stage's user, working directory, ports,
// entrypoint, command, environment and label names, and the same user
// database and directories.
func TestDockerfileDeclaresTheSameImage(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	_, final, ok := strings.Cut(df, "\nFROM scratch\n")
	if !ok {
		t.Fatal("Dockerfile: no final stage FROM scratch (the empty base)")
	}
	// Join continuation lines, then read the instructions.
	final = strings.ReplaceAll(final, "\\\n", " ")
	got := map[string]string{}
	var labels []string
	for _, l := range strings.Split(final, "\n") {
		op, arg, _ := strings.Cut(strings.TrimSpace(l), " ")
		switch op {
		case "USER", "WORKDIR", "EXPOSE", "ENTRYPOINT", "CMD", "ENV":
			got[op] = strings.TrimSpace(arg)
		case "LABEL":
			for _, m := range regexp.MustCompile(`(org\.opencontainers\.image\.[a-z]+)=`).FindAllStringSubmatch(arg, -1) {
				labels = append(labels, m[1])
			}
		}
	}
	img := readArchive(t, builtArchive(t))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	quote := func(ss []string) string {
		b, _ := json.Marshal(ss)
		return strings.ReplaceAll(string(b), ",", ", ")
	}
	ports := slices.Sorted(func(yield func(string) bool) {
		for p := range c.ExposedPorts {
			if !yield(strings.TrimSuffix(p, "/tcp")) {
				return
			}
		}
	})
	want := map[string]string{
		"USER": c.User, "WORKDIR": c.WorkingDir, "EXPOSE": strings.Join(ports, " "),
		"ENTRYPOINT": quote(c.Entrypoint), "CMD": quote(c.Cmd), "ENV": strings.Join(c.Env, " "),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Dockerfile %s %q, the Go builder's %q", k, got[k], v)
		}
	}
	wantLabels := slices.Sorted(func(yield func(string) bool) {
		for k := range c.Labels {
			if !yield(k) {
				return
			}
		}
	})
	if slices.Sort(labels); !slices.Equal(labels, wantLabels) {
		t.Errorf("Dockerfile labels %v, the Go builder's %v", labels, wantLabels)
	}
	for name, body := range map[string]string{"passwd": passwd, "group": group} {
		if !strings.Contains(df, "'"+strings.ReplaceAll(body, "\n", `\n`)+"' > /rootfs/etc/"+name) {
			t.Errorf("Dockerfile does not write the builder's /etc/%s", name)
		}
	}
	for _, d := range []string{"/rootfs/etc/ssl/certs", "/rootfs/etc/keygate", "/rootfs/home/nonroot", "/rootfs/tmp", "/rootfs/var/lib/keygate"} {
		if !strings.Contains(df, d) {
			t.Errorf("Dockerfile does not create %s", d)
		}
	}
}
