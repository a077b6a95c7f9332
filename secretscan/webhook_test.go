package secretscan_test

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/secretscan"
)

// TestWebhookSignedAndRetried: the operator's endpoint receives the notice
// with a valid HMAC signature, after failures that are retried with
// backoff; Close ends the sender.
func TestWebhookSignedAndRetried(t *testing.T) {
	secret := []byte("operator-secret")
	var calls atomic.Int64
	got := make(chan secretscan.Notice, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !hmac.Equal([]byte(r.Header.Get(secretscan.SignatureHeader)), []byte(secretscan.Sign(secret, body))) {
			t.Errorf("bad signature %q", r.Header.Get(secretscan.SignatureHeader))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var n secretscan.Notice
		if err := json.Unmarshal(body, &n); err != nil {
			t.Error(err)
		}
		got <- n
	}))
	defer srv.Close()
	wh, err := secretscan.NewWebhook(secretscan.WebhookConfig{URL: srv.URL, Secret: secret, Backoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	wh.Notify(secretscan.Notice{Event: "key.leaked", KeyID: "key_0123456789abcdef", URL: "https://github.com/o/r", Action: "revoke"})
	select {
	case n := <-got:
		if n.KeyID != "key_0123456789abcdef" || n.Action != "revoke" {
			t.Fatalf("notice %+v", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no notice delivered")
	}
	if calls.Load() != 3 {
		t.Fatalf("%d attempts, want 3", calls.Load())
	}
	if err := wh.Close(); err != nil {
		t.Fatal(err)
	}
	wh.Notify(secretscan.Notice{KeyID: "after-close"}) // must not block or panic
}

func TestWebhookConfig(t *testing.T) {
	if _, err := secretscan.NewWebhook(secretscan.WebhookConfig{URL: "http://127.0.0.1:1"}); err == nil {
		t.Fatal("a webhook without a secret was accepted")
	}
}
