// Command image builds keygate's container image without a Docker daemon,
// with go-containerregistry: on an empty base, the static binary
// (/keygate), the build machine's CA certificates, /etc/passwd and
// /etc/group naming the non-root user 65532, and /var/lib/keygate owned
// by it; no shell, no package manager, nothing else. It writes an OCI
// image layout as a tar archive (oci-archive), which podman, skopeo and
// crane read:
//
//	go run ./deploy/image -o keygate.oci.tar -revision $(git rev-parse HEAD)
//	podman load -i keygate.oci.tar      # localhost/keygate:0.1.0 (the release, cli.Release); or skopeo copy oci-archive:keygate.oci.tar docker://registry/keygate:TAG
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/keygate/keygate/cli"
)

// Options say what to build.
type Options struct {
	// ModuleDir is the repository root (where go.mod is).
	ModuleDir string
	// Version is stamped into the binary (keygate version) and the
	// org.opencontainers.image.version label; default cli.Release.
	Version string
	// Revision is the git commit, for org.opencontainers.image.revision.
	Revision string
	// Licenses is the SPDX expression of org.opencontainers.image.licenses;
	// default Apache-2.0, the repository's LICENSE.
	Licenses string
	// CACerts is the PEM bundle copied to /etc/ssl/certs/ca-certificates.crt.
	CACerts string
	// Arch is the target GOARCH; default the build machine's.
	Arch string
}

// The user database of the image: root and nonroot (65532), neither with a
// shell.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// License is the SPDX expression of the repository's LICENSE.
const License = "Apache-2.0"

const (
	uid        = 65532
	source     = "https://github.com/keygate/keygate"
	binaryPath = "keygate"
)

// Build compiles keygate statically and assembles the image.
func Build(o Options) (v1.Image, error) {
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.Licenses == "" {
		o.Licenses = License
	}
	if o.Version == "" {
		o.Version = cli.Release
	}
	if o.CACerts == "" {
		o.CACerts = "/etc/ssl/certs/ca-certificates.crt"
	}
	tmp, err := os.MkdirTemp("", "keygate-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "keygate")
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/keygate/keygate/cli.Version="+o.Version,
		"-o", bin, "./cmd/keygate")
	cmd.Dir = o.ModuleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %w\n%s", err, out)
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	// Fixed times: the same inputs give the same layers.
	epoch := time.Unix(0, 0).UTC()
	files := []entry{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: certs},
		{name: "etc/keygate/", dir: true, mode: 0o755},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/nonroot/", dir: true, mode: 0o700, owner: uid},
		{name: "tmp/", dir: true, mode: 0o1777},
		{name: "var/", dir: true, mode: 0o755},
		{name: "var/lib/", dir: true, mode: 0o755},
		{name: "var/lib/keygate/", dir: true, mode: 0o700, owner: uid},
	}
	base, err := layer(files, epoch)
	if err != nil {
		return nil, err
	}
	app, err := layer([]entry{{name: binaryPath, mode: 0o555, body: binary}}, epoch)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, base, app)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint:   []string{"/" + binaryPath},
		Cmd:          []string{"serve", "--config", "/etc/keygate/keygate.yaml"},
		WorkingDir:   "/var/lib/keygate",
		Env:          []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		ExposedPorts: map[string]struct{}{"8443/tcp": {}, "9090/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "keygate",
			"org.opencontainers.image.description": "keygate, an authenticating reverse proxy in front of the Document Extraction Service",
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.revision":    o.Revision,
			"org.opencontainers.image.source":      source,
			"org.opencontainers.image.licenses":    o.Licenses,
		},
	}
	return mutate.ConfigFile(img, cf)
}

// entry is one file or directory of a layer.
type entry struct {
	name  string
	dir   bool
	mode  int64
	owner int
	body  []byte
}

func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.owner, Gid: e.owner, ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteOCIArchive writes img as a tar of an OCI image layout, tagged ref
// (org.opencontainers.image.ref.name), to path.
func WriteOCIArchive(img v1.Image, ref, path string) error {
	dir, err := os.MkdirTemp("", "keygate-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(file string, fi os.FileInfo, err error) error {
		if err != nil || file == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, file)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func main() {
	var o Options
	out := flag.String("o", "keygate.oci.tar", "the OCI archive to write")
	ref := flag.String("tag", "", "the image's name in the archive (default keygate:VERSION)")
	flag.StringVar(&o.ModuleDir, "C", ".", "the repository root")
	flag.StringVar(&o.Version, "version", cli.Release, "the version stamped into the binary and the labels")
	flag.StringVar(&o.Revision, "revision", "", "the git commit for the revision label")
	flag.StringVar(&o.Licenses, "licenses", License, "SPDX expression for the licenses label")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates to include")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "target architecture")
	flag.Parse()
	img, err := Build(o)
	if err == nil {
		r := *ref
		if r == "" {
			r = "keygate:" + strings.TrimPrefix(o.Version, "v")
		}
		err = WriteOCIArchive(img, r, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	d, _ := img.Digest()
	fmt.Printf("wrote %s (%s)\n", *out, d)
}
