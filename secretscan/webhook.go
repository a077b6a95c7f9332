package secretscan

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// SignatureHeader carries a webhook body's HMAC-SHA256 under the
// operator's secret: "sha256=" and the hex digest.
const SignatureHeader = "Keygate-Signature"

// WebhookConfig configures a Webhook.
type WebhookConfig struct {
	// URL receives each Notice as a JSON POST. Required.
	URL string
	// Secret keys the HMAC of SignatureHeader. Required.
	Secret []byte
	// Client sends; nil means a client with a 10 s timeout.
	Client *http.Client
	// Attempts is the number of tries per notice (0 means 6); Backoff
	// the wait before the second, doubling after each (0 means 1 s).
	Attempts int
	Backoff  time.Duration
	// Queue is how many notices may wait (0 means 1000); more are
	// dropped and logged.
	Queue  int
	Logger *zap.Logger
}

// Webhook sends notices to the operator's URL from one goroutine,
// retrying failures (a non-2xx answer or no answer) with exponential
// backoff. Close stops it. It is safe for concurrent use.
type Webhook struct {
	cfg    WebhookConfig
	log    *zap.Logger
	q      chan Notice
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewWebhook checks cfg and starts the sender.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	if cfg.URL == "" || len(cfg.Secret) == 0 {
		return nil, errors.New("secretscan: webhook: a url and a secret are required")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 6
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Webhook{cfg: cfg, log: cfg.Logger.Named("secretscan.webhook"), q: make(chan Notice, cfg.Queue), ctx: ctx, cancel: cancel}
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// Sign returns the SignatureHeader value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Notify queues n; it never blocks.
func (w *Webhook) Notify(n Notice) {
	select {
	case <-w.ctx.Done():
		return
	default:
	}
	select {
	case w.q <- n:
	default:
		w.log.Error("webhook queue full; notice dropped", zap.String("key_id", n.KeyID))
	}
}

// Close stops the sender; notices not yet delivered are dropped.
func (w *Webhook) Close() error {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
	return nil
}

func (w *Webhook) run() {
	defer w.wg.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case n := <-w.q:
			w.deliver(n)
		}
	}
}

func (w *Webhook) deliver(n Notice) {
	body, _ := json.Marshal(n)
	wait := w.cfg.Backoff
	for i := 1; ; i++ {
		err := w.send(body)
		if err == nil {
			return
		}
		if i == w.cfg.Attempts {
			w.log.Error("webhook gave up", zap.String("key_id", n.KeyID), zap.Int("attempts", i), zap.Error(err))
			return
		}
		w.log.Warn("webhook failed; retrying", zap.String("key_id", n.KeyID), zap.Int("attempt", i), zap.Duration("in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait *= 2
	}
}

func (w *Webhook) send(body []byte) error {
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(w.cfg.Secret, body))
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
