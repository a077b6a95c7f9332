package standin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keygate/keygate/standin"
)

func TestEchoReportsWhatArrived(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(standin.Handler{Name: "extraction"})
	defer srv.Close()
	body := "hello upstream"
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/sync?a=1", strings.NewReader(body))
	req.Header.Set("X-Keygate-Key-Id", "key_1")
	req.Header.Set("X-Api-Key", "svc_live_should_be_flagged")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e standin.Echo
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	if e.Backend != "extraction" || e.Method != "POST" || e.Path != "/sync" || e.RawQuery != "a=1" {
		t.Errorf("echo = %+v", e)
	}
	if e.Bytes != int64(len(body)) || e.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("bytes/sha = %d %s", e.Bytes, e.SHA256)
	}
	if e.Identity["x-keygate-key-id"] != "key_1" || !e.SawAPIKey {
		t.Errorf("identity = %v saw key = %v", e.Identity, e.SawAPIKey)
	}
}
