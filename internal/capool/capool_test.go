package capool_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/capool"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

func TestLoad(t *testing.T) {
	ca := testkit.NewCA(t, "capool test")
	dir := t.TempDir()
	good := filepath.Join(dir, "ca.pem")
	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(good, ca.PEM, 0o600)
	_ = os.WriteFile(bad, []byte("not a certificate"), 0o600)

	if _, err := capool.Load(good); err != nil {
		t.Fatalf("good file: %v", err)
	}
	if _, err := capool.WithSystem(good); err != nil {
		t.Fatalf("good file with the system's roots: %v", err)
	}
	if _, err := capool.LoadInline(string(ca.PEM)); err != nil {
		t.Fatalf("inline PEM: %v", err)
	}
	if _, err := capool.Load(string(ca.PEM)); err == nil {
		t.Fatal("Load took inline PEM; only LoadInline may")
	}
	if _, err := capool.Load(bad); !errors.Is(err, capool.ErrNoCertificate) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("a file without a certificate: %v", err)
	}
	if _, err := capool.Load(filepath.Join(dir, "missing.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}
