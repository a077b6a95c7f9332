package secretscan_test

import (
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/secretscan"
)

// signPy signs the file argv[2] with the PEM private key argv[1] the way
// GitHub's documentation shows (ECDSA P-256, SHA-256, DER, base64), with
// Python's cryptography package: an implementation independent of Go's.
const signPy = `
import base64, sys
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
key = serialization.load_pem_private_key(open(sys.argv[1], "rb").read(), password=None)
body = open(sys.argv[2], "rb").read()
print(base64.b64encode(key.sign(body, ec.ECDSA(hashes.SHA256()))).decode())
`

// TestAlertSignedByPython: an alert signed by Python's cryptography
// package is accepted, and the key it names is revoked.
func TestAlertSignedByPython(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import cryptography").Run(); err != nil {
		t.Fatalf("python3-cryptography is not installed (make deps installs it): %v", err)
	}
	f := newFixture(t, nil, nil)
	dir := t.TempDir()
	der, err := x509.MarshalPKCS8PrivateKey(f.sig.priv)
	if err != nil {
		t.Fatal(err)
	}
	keyPath, bodyPath := filepath.Join(dir, "key.pem"), filepath.Join(dir, "alert.json")
	body := alert(t, secretscan.Match{Token: f.live, Type: "keygate_live_key", URL: "https://github.com/o/r/blob/1/x", Source: "content"})
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bodyPath, body, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/usr/bin/python3", "-c", signPy, keyPath, bodyPath).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	w := f.post(t, body, f.sig.id, strings.TrimSpace(string(out)))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if fb := feedback(t, w); len(fb) != 1 || fb[0].Label != secretscan.TruePositive {
		t.Fatalf("feedback %+v", fb)
	}
	if rec := status(t, f, f.liveID); rec.Status != keystore.Revoked {
		t.Fatalf("key is %s, want revoked", rec.Status)
	}
}
