package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/keygate/keygate/internal/testsupport/testkit"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/standin"
)

// TestKeyLifecycleWithoutRestart issues, lists, rotates and revokes keys
// with the CLI while the gateway serves, and checks each change reaches the
// running gateway without a restart. At the end it scans the gateway's logs
// and the keystore file for every key it handled.
func TestKeyLifecycleWithoutRestart(t *testing.T) {
	g := startGateway(t, gwOpts{})
	var keys []string
	pdf := []byte("%PDF-1.4 lifecycle")

	k1 := g.issue("--product", "extraction", "--env", "live", "--context", ctxA, "--name", "billing app")
	keys = append(keys, k1)
	if !regexp.MustCompile(`^svc_live_[0-9A-Za-z]+$`).MatchString(k1) || len(k1) < 9+22 {
		t.Fatalf("issued key has the wrong shape (len %d)", len(k1))
	}
	eventually(t, testkit.HangCheck, func() string {
		if s, b, _ := g.post(k1, ctxA, pdf); s != 200 {
			return fmt.Sprintf("new key: %d %s", s, b)
		}
		return ""
	})

	if _, errOut, err := g.keygate("keys", "issue", "--product", "extraction", "--env", "live"); err == nil || !strings.Contains(errOut, "context") {
		t.Errorf("extraction key without --context: err %v, stderr %q", err, errOut)
	}
	reg := g.issue("--product", "registry", "--env", "test", "--name", "schemas")
	keys = append(keys, reg)

	recs := g.list()
	if len(recs) != 2 {
		t.Fatalf("list: %d records", len(recs))
	}
	r := recs[0]
	if r.ID == "" || r.Name != "billing app" || r.Product != "extraction" || r.Env != "live" || r.Context != ctxA || r.Status != "active" || r.CreatedAt == "" {
		t.Errorf("record = %+v", r)
	}
	raw, _, _ := g.keygate("keys", "list", "--json")
	for _, field := range []string{`"id"`, `"name"`, `"product"`, `"env"`, `"context"`, `"status"`, `"created_at"`, `"expires_at"`} {
		if !strings.Contains(raw, field) {
			t.Errorf("list --json lacks %s", field)
		}
	}
	if strings.Contains(raw, "sha256") || strings.Contains(raw, "svc_") {
		t.Error("list --json shows a hash or a key")
	}

	// Rotate with a grace period: both keys work, then the old one expires.
	out, errOut, err := g.keygate("keys", "rotate", r.ID, "--grace", "2s")
	if err != nil {
		t.Fatalf("rotate: %v %s", err, errOut)
	}
	k2 := strings.SplitN(out, "\n", 2)[0]
	keys = append(keys, k2)
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(k2, ctxA, pdf); s != 200 {
			return fmt.Sprintf("rotated-in key: %d", s)
		}
		return ""
	})
	if s, _, _ := g.post(k1, ctxA, pdf); s != 200 {
		t.Errorf("old key during grace: %d", s)
	}
	eventually(t, testkit.HangCheck, func() string {
		if s, b, _ := g.post(k1, ctxA, pdf); s != 401 || !strings.Contains(string(b), "expired") {
			return fmt.Sprintf("old key after grace: %d %s", s, b)
		}
		return ""
	})

	// Rotate without grace: the old key is refused at once.
	id2 := ""
	for _, rec := range g.list() {
		if rec.Status == "active" && rec.Product == "extraction" {
			id2 = rec.ID
		}
	}
	out, _, err = g.keygate("keys", "rotate", id2)
	if err != nil {
		t.Fatal(err)
	}
	k3 := strings.SplitN(out, "\n", 2)[0]
	keys = append(keys, k3)
	eventually(t, testkit.HangCheck, func() string {
		s2, _, _ := g.post(k2, ctxA, pdf)
		s3, _, _ := g.post(k3, ctxA, pdf)
		if s2 != 401 || s3 != 200 {
			return fmt.Sprintf("after rotate without grace: old %d new %d", s2, s3)
		}
		return ""
	})

	// Revoke: refused without a restart, with a message that says so.
	var id3 string
	for _, rec := range g.list() {
		if rec.Status == "active" && rec.Product == "extraction" {
			id3 = rec.ID
		}
	}
	if _, errOut, err := g.keygate("keys", "revoke", id3); err != nil {
		t.Fatalf("revoke: %v %s", err, errOut)
	}
	eventually(t, testkit.HangCheck, func() string {
		if s, b, _ := g.post(k3, ctxA, pdf); s != 401 || !strings.Contains(string(b), "revoked") {
			return fmt.Sprintf("revoked key: %d %s", s, b)
		}
		return ""
	})

	// Nothing on disk or in the logs holds a key.
	file, err := os.ReadFile(filepath.Join(g.dir, "keys.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	g.signal(syscall.SIGTERM)
	_ = g.wait(10 * time.Second)
	logs := g.logs.String()
	if !strings.Contains(logs, `"key_id"`) {
		t.Error("access logs carry no key_id; the scan below would prove nothing")
	}
	for i, k := range keys {
		if bytes.Contains(file, []byte(k)) || bytes.Contains(file, []byte(k[9:])) {
			t.Errorf("keystore file holds key %d in plain text", i)
		}
		if strings.Contains(logs, k) || strings.Contains(logs, k[9:]) {
			t.Errorf("logs hold key %d", i)
		}
	}
}

// TestSIGTERMDrainsSlowUploads starts 5 slow uploads, sends SIGTERM while
// they are in flight, and expects all 5 to complete with 200 and the
// process to exit cleanly.
func TestSIGTERMDrainsSlowUploads(t *testing.T) {
	var counting atomic.Bool
	arrived := make(chan struct{}, 16)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if counting.Load() {
			arrived <- struct{}{}
		}
		standin.Handler{Name: "extraction"}.ServeHTTP(w, r)
	})
	g := startGateway(t, gwOpts{upstream: up})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(key, ctxA, []byte("warm")); s != 200 {
			return fmt.Sprint(s)
		}
		return ""
	})
	counting.Store(true)

	type res struct {
		status int
		sum    string
		err    error
	}
	results := make(chan res, 5)
	for i := 0; i < 5; i++ {
		go func() {
			pr, pw := io.Pipe()
			boundary := "slowUploadBoundary"
			go func() {
				fmt.Fprintf(pw, "--%s\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n%s\r\n--%s\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.pdf\"\r\n\r\n", boundary, ctxA, boundary)
				for j := 0; j < 20; j++ { // about 2 s of trickling
					fmt.Fprintf(pw, "chunk %02d of a slow upload\n", j)
					time.Sleep(100 * time.Millisecond)
				}
				fmt.Fprintf(pw, "\r\n--%s--\r\n", boundary)
				pw.Close()
			}()
			resp, err := g.postMultipart(key, boundary, pr)
			if err != nil {
				results <- res{err: err}
				return
			}
			defer resp.Body.Close()
			var e standin.Echo
			_ = json.NewDecoder(resp.Body).Decode(&e)
			results <- res{status: resp.StatusCode, sum: e.SHA256}
		}()
	}
	for i := 0; i < 5; i++ { // all 5 are streaming through to the upstream
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d uploads reached the upstream", i)
		}
	}
	g.signal(syscall.SIGTERM)
	for i := 0; i < 5; i++ {
		r := <-results
		if r.err != nil || r.status != 200 || r.sum == "" {
			t.Errorf("upload %d: status %d err %v", i, r.status, r.err)
		}
	}
	if err := g.wait(20 * time.Second); err != nil {
		t.Errorf("keygate did not exit cleanly after draining: %v", err)
	}
	if !strings.Contains(g.logs.String(), "draining") {
		t.Error("no drain in the logs")
	}
}

// TestRealClients uploads with curl -F and with Node's fetch and FormData.
func TestRealClients(t *testing.T) {
	g := startGateway(t, gwOpts{})
	key := g.issue("--product", "extraction", "--env", "test", "--context", ctxA)
	doc := filepath.Join(g.dir, "invoice.pdf")
	content := bytes.Repeat([]byte("%PDF-1.7 real client\n"), 5000)
	if err := os.WriteFile(doc, content, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(key, ctxA, []byte("x")); s != 200 {
			return fmt.Sprint(s)
		}
		return ""
	})
	curl := func(field, contextID string) (int, string) {
		cmd := exec.Command("curl", "-sk", "-o", "-", "-w", "\n%{http_code}", "-H", "x-api-key: "+key,
			"-F", "files=@"+doc+";type=application/pdf", "-F", "id=2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a", "-F", field+"="+contextID, g.API+"/sync")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v %s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		code, _ := strconv.Atoi(lines[len(lines)-1])
		return code, strings.Join(lines[:len(lines)-1], "\n")
	}
	for _, c := range []struct {
		field, ctx string
		want       int
	}{{"contextId", ctxA, 200}, {"contextID", ctxA, 200}, {"contextId", ctxB, 403}} {
		code, body := curl(c.field, c.ctx)
		if code != c.want {
			t.Errorf("curl -F %s=%s: %d %s", c.field, c.ctx, code, body)
		}
		if code == 200 && !strings.Contains(body, `"bytes": `) {
			t.Errorf("curl: body %s", body)
		}
	}

	script := `
const fs = require('fs');
(async () => {
  const fd = new FormData();
  fd.append('files', new Blob([fs.readFileSync(process.env.DOC)], { type: 'application/pdf' }), 'invoice.pdf');
  fd.append('id', '2b7e1516-28ae-4d2a-a6f7-15884c3f4e2a');
  fd.append('contextId', process.env.CTX);
  const res = await fetch(process.env.URL, { method: 'POST', headers: { 'x-api-key': process.env.KEY }, body: fd });
  console.log(res.status);
  console.log(await res.text());
})().catch((e) => { console.error(e); process.exit(1); });
`
	for _, c := range []struct {
		ctx  string
		want string
	}{{ctxA, "200"}, {ctxB, "403"}} {
		cmd := exec.Command("node", "-e", script)
		cmd.Env = append(os.Environ(), "DOC="+doc, "CTX="+c.ctx, "URL="+g.API+"/sync", "KEY="+key, "NODE_TLS_REJECT_UNAUTHORIZED=0", "NODE_NO_WARNINGS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		if first := strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]; first != c.want {
			t.Errorf("node fetch with context %s: %s", c.ctx, out)
		}
		if c.want == "200" {
			sum := sha256.Sum256(nil)
			_ = sum
			if !strings.Contains(string(out), `"sha256"`) {
				t.Errorf("node: %s", out)
			}
		}
	}
}

// TestPeakMemoryOfLargeUploads reports the gateway process's peak resident
// memory while a 64 MiB upload with the context after the file passes
// through, as a ratio to the upload size.
func TestPeakMemoryOfLargeUploads(t *testing.T) {
	g := startGateway(t, gwOpts{})
	key := g.issue("--product", "extraction", "--env", "live", "--context", ctxA)
	eventually(t, testkit.HangCheck, func() string {
		if s, _, _ := g.post(key, ctxA, []byte("x")); s != 200 {
			return fmt.Sprint(s)
		}
		return ""
	})
	before := vmHWM(t, g.cmd.Process.Pid)
	const size = 64 << 20
	pr, pw := io.Pipe()
	h := sha256.New()
	boundary := "memBoundary"
	go func() {
		w := io.MultiWriter(pw, h)
		fmt.Fprintf(w, "--%s\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.pdf\"\r\nContent-Type: application/pdf\r\n\r\n", boundary)
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for written := 0; written < size; written += len(chunk) {
			_, _ = w.Write(chunk)
		}
		fmt.Fprintf(w, "\r\n--%s\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n%s\r\n--%s--\r\n", boundary, ctxA, boundary)
		pw.Close()
	}()
	resp, err := g.postMultipart(key, boundary, pr)
	if err != nil {
		t.Fatal(err)
	}
	var e standin.Echo
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 200 || e.SHA256 != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("status %d, upstream sha %s, sent %s", resp.StatusCode, e.SHA256, hex.EncodeToString(h.Sum(nil)))
	}
	peak := vmHWM(t, g.cmd.Process.Pid)
	growth := float64(peak-before) / float64(size)
	t.Logf("64 MiB upload, context after the file: gateway peak RSS %.1f MiB (%.1f MiB before it); the upload raised the peak by %.3f of its size",
		float64(peak)/(1<<20), float64(before)/(1<<20), growth)
	if growth > 0.25 {
		t.Errorf("the upload raised the gateway's peak RSS by %.0f%% of its size: it is being buffered in memory", growth*100)
	}
}

// vmHWM reads a process's peak resident set size from /proc.
func vmHWM(t *testing.T, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(sc.Text())[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestInvalidConfigNamesTheField starts the binary with bad configs and
// expects a non-zero exit and a message that names the bad field.
func TestInvalidConfigNamesTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, field string }{
		{"ratelimit:\n  status: 500\n", "ratelimit.status"},
		{"tls:\n  mode: sometimes\n", "tls.mode"},
		{"upstreams:\n  extraction: { targets: [] }\n", "upstreams.extraction.targets"},
		{"server:\n  max_body_bytes: -1\n", "server.max_body_bytes"},
		{"server:\n  listne: \":1\"\n", "listne"},
		{"keystore:\n  backend: postgres\n", "keystore.backend"},
		{"server:\n  spool_dir: /nonexistent/keygate-spool\n", "server.spool_dir"},
	} {
		path := filepath.Join(t.TempDir(), "bad.yaml")
		_ = os.WriteFile(path, []byte(c.yaml), 0o600)
		out, err := exec.Command(binary, "serve", "--config", path).CombinedOutput()
		if err == nil {
			t.Errorf("%q: started", c.yaml)
			continue
		}
		if !strings.Contains(string(out), c.field) {
			t.Errorf("%q: message %q does not name %s", c.yaml, out, c.field)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "keygate ") {
		t.Errorf("version: %v %q", err, out)
	}
}

// postMultipart posts body, a multipart form with boundary, to /sync
// with key.
func (g *gateway) postMultipart(key, boundary string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequest("POST", g.API+"/sync", body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
	req.Header.Set("X-Api-Key", key)
	return g.Client.Do(req)
}
