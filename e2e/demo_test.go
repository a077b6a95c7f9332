package e2e

import (
	"bufio"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testsupport/browsertest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// TestMakeRunDemo does what the README tells a newcomer: start keygate on
// its embedded defaults (what `make run` runs) and paste the two printed
// curl lines. The first must get 200 and the second 403. Then, in a
// browser, open the printed portal URL, use the development sign-in,
// create a key, and use it with the third printed curl line: 200. The
// printed admin API curl line lists consumers (200), the README's
// `"plan":"pro"` consumer is created (201), and the terminal shows no
// request line: they are in data/access.log, as the banner says.
func TestMakeRunDemo(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8443", "127.0.0.1:8444", "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9090", "127.0.0.1:9091"} {
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
	var portalURL, accessLog string
	var banner strings.Builder
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
	for len(curls) < 4 || accessLog == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo stopped printing after %d curl lines", len(curls))
			}
			banner.WriteString(l + "\n")
			if p, ok := strings.CutPrefix(l, "Access log: "); ok {
				accessLog, _, _ = strings.Cut(p, " ")
			}
			if s := strings.TrimSpace(l); strings.HasPrefix(s, "curl ") {
				curls = append(curls, s)
			}
			if u, ok := strings.CutPrefix(l, "Self-service portal: "); ok {
				portalURL = strings.TrimSpace(u)
			}
		case <-timeout:
			t.Fatalf("demo printed no four curl lines and access log within 30s:\n%s", banner.String())
		}
	}
	if accessLog != "data/access.log" {
		t.Errorf("the banner names the access log %q, want data/access.log", accessLog)
	}
	adminCurl := curls[3]
	if !strings.Contains(adminCurl, "Authorization: Bearer kga_") || !strings.Contains(adminCurl, "http://127.0.0.1:9091/v1/consumers") {
		t.Fatalf("the admin API curl line: %s", adminCurl)
	}
	eventually(t, testkit.HangCheck, func() string {
		out, _ := exec.Command("bash", "-c", adminCurl+" -w ' %{http_code}'").Output()
		if s := string(out); !strings.HasPrefix(s, `{"items":[`) || !strings.HasSuffix(s, " 200") || !strings.Contains(s, "Demo customer") {
			return "the printed admin API curl line got " + s
		}
		return ""
	})
	// The README's admin API example names the plan pro.
	proCurl := strings.Replace(adminCurl, "/v1/consumers", "/v1/consumers -H 'Content-Type: application/json' -d '{\"name\":\"Acme Corp\",\"plan\":\"pro\"}'", 1)
	if out, _ := exec.Command("bash", "-c", proCurl+" -w ' %{http_code}'").Output(); !strings.HasSuffix(string(out), " 201") {
		t.Errorf("a consumer on plan pro: %s", out)
	}
	want := []string{"200", "403"}
	for i, line := range curls[:2] {
		var code string
		eventually(t, testkit.HangCheck, func() string {
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

	// The token endpoint: the printed exchange, then /sync with the token.
	var exchange, tokenSync string
	for _, l := range strings.Split(banner.String(), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "ACCESS_TOKEN=$(curl ") {
			exchange = l
		}
		if strings.HasPrefix(l, "curl ") && strings.Contains(l, "Bearer $ACCESS_TOKEN") {
			tokenSync = l
		}
	}
	if exchange == "" || tokenSync == "" || !strings.Contains(exchange, "-u 'key_") || !strings.Contains(exchange, ":svc_live_") {
		t.Fatalf("the banner has no token exchange and /sync lines:\n%s", banner.String())
	}
	eventually(t, testkit.HangCheck, func() string {
		c := exec.Command("bash", "-c", exchange+"; "+tokenSync+" -s -o /dev/null -w '%{http_code}'")
		c.Dir = dir
		out, _ := c.Output()
		if string(out) != "200" {
			return "the printed token exchange and /sync got " + string(out) + ", want 200"
		}
		return ""
	})

	if portalURL != "https://localhost:8444" {
		t.Fatalf("the demo prints the portal at %q", portalURL)
	}
	key := demoPortalKey(t, dir, portalURL)
	var code string
	eventually(t, testkit.HangCheck, func() string {
		c := exec.Command("bash", "-c", "KEY='"+key+"'; "+curls[2]+" -s -o /dev/null -w '%{http_code}'")
		c.Dir = dir
		out, _ := c.Output()
		if code = string(out); code != "200" {
			return "the portal's key with the printed curl line got " + code + ", want 200"
		}
		return ""
	})

	// No request line in the terminal; all of them in data/access.log
	// (flushed within a second).
	eventually(t, testkit.HangCheck, func() string {
		data, _ := os.ReadFile(filepath.Join(dir, "data", "access.log"))
		log := string(data)
		for _, want := range []string{`"logger":"access"`, `"status":403`, `"logger":"admin_api"`, `"logger":"portal"`} {
			if !strings.Contains(log, want) {
				return "data/access.log lacks " + want + ":\n" + tail(log, 2000)
			}
		}
		return ""
	})
	for _, line := range strings.Split(logs.String()+banner.String(), "\n") {
		for _, req := range []string{`"logger":"access"`, `"logger":"admin_api"`, `"logger":"portal"`} {
			if strings.Contains(line, req) && strings.Contains(line, `"level":"info"`) {
				t.Errorf("a request line in the terminal: %s", line)
			}
		}
	}
}

// demoPortalKey signs in to the demo's portal with the development
// sign-in, in a browser, creates a key and returns it.
func demoPortalKey(t *testing.T, dir, portalURL string) string {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dir, "data", "tls", "cert.pem"))
	if err != nil {
		t.Fatalf("the demo's certificate: %v", err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ctx := browsertest.New(t, browsertest.TrustCerts(cert))
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	browsertest.Do(t, ctx, "open the portal", chromedp.Navigate(portalURL), chromedp.WaitVisible(css("#dev-login")))
	if !strings.Contains(strings.ToLower(browsertest.Text(t, ctx, "form.dev")), "demo mode only") {
		t.Fatal("the development sign-in is not labelled as such")
	}
	browsertest.Screenshot(t, ctx, "demo-sign-in")
	browsertest.Do(t, ctx, "development sign-in", chromedp.Click(css("#dev-login")), chromedp.WaitVisible(css(`a[href="/keys/new"].button`)))
	browsertest.Screenshot(t, ctx, "demo-keys")
	browsertest.Do(t, ctx, "create a key",
		chromedp.Navigate(portalURL+"/keys/new"),
		chromedp.WaitVisible(css("#create")),
		chromedp.SendKeys(css("#name"), "my first key"),
		chromedp.Click(css("#create")),
		chromedp.WaitVisible(css("#newkey")),
	)
	browsertest.Screenshot(t, ctx, "demo-key-created")
	key := browsertest.Get(t, ctx, "read the key", chromedp.Value(css("#newkey")))
	if !strings.HasPrefix(key, "svc_live_") {
		t.Fatalf("the portal showed %q", key)
	}
	return key
}
