package secretscan

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// MaxKeysBytes caps a published-keys document (GitHub's is a few KiB).
const MaxKeysBytes = 1 << 20

// publishedKeys is GitHub's published-keys document:
// {"public_keys":[{"key_identifier":"…","key":"-----BEGIN PUBLIC KEY-----…","is_current":true}]}.
type publishedKeys struct {
	PublicKeys []struct {
		KeyIdentifier string `json:"key_identifier"`
		Key           string `json:"key"`
		IsCurrent     bool   `json:"is_current"`
	} `json:"public_keys"`
}

// ParseKeys parses a published-keys document into ECDSA P-256 keys by
// identifier. Every key is kept, current or not: GitHub signs with a key
// while it is listed.
func ParseKeys(b []byte) (map[string]*ecdsa.PublicKey, error) {
	var doc publishedKeys
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("secretscan: signing keys: %w", err)
	}
	if len(doc.PublicKeys) == 0 {
		return nil, errors.New("secretscan: signing keys: public_keys is empty")
	}
	m := make(map[string]*ecdsa.PublicKey, len(doc.PublicKeys))
	for i, k := range doc.PublicKeys {
		if k.KeyIdentifier == "" {
			return nil, fmt.Errorf("secretscan: signing keys: public_keys[%d]: key_identifier is empty", i)
		}
		blk, _ := pem.Decode([]byte(k.Key))
		if blk == nil || blk.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("secretscan: signing keys: public_keys[%d] (%s): key is not a PEM public key", i, k.KeyIdentifier)
		}
		pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("secretscan: signing keys: public_keys[%d] (%s): %w", i, k.KeyIdentifier, err)
		}
		ec, ok := pub.(*ecdsa.PublicKey)
		if !ok || ec.Curve != elliptic.P256() {
			return nil, fmt.Errorf("secretscan: signing keys: public_keys[%d] (%s): not an ECDSA P-256 key", i, k.KeyIdentifier)
		}
		m[k.KeyIdentifier] = ec
	}
	return m, nil
}

// KeysConfig says where the signing keys come from: a file or a URL in
// GitHub's published shape (exactly one of them).
type KeysConfig struct {
	// File is a published-keys document on disk.
	File string
	// URL serves a published-keys document, such as
	// https://api.github.com/meta/public_keys/secret_scanning.
	URL string
	// Client fetches URL; nil means a client with a 10 s timeout.
	Client *http.Client
	// MinRefresh is the least time between two reloads that an unknown
	// key identifier triggers; 0 means one minute. It bounds what a
	// caller sending made-up identifiers can make keygate fetch.
	MinRefresh time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Keys holds the signing keys, reloaded on an unknown identifier at most
// once per MinRefresh. It is safe for concurrent use.
type Keys struct {
	cfg KeysConfig

	mu     sync.Mutex // guards keys and loaded
	keys   map[string]*ecdsa.PublicKey
	loaded time.Time
	fetch  sync.Mutex // one reload at a time
}

// NewKeys loads the keys once and returns them.
func NewKeys(ctx context.Context, cfg KeysConfig) (*Keys, error) {
	if (cfg.File == "") == (cfg.URL == "") {
		return nil, errors.New("secretscan: exactly one of a keys file and a keys URL is required")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.MinRefresh <= 0 {
		cfg.MinRefresh = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	k := &Keys{cfg: cfg}
	m, err := k.read(ctx)
	if err != nil {
		return nil, err
	}
	k.keys, k.loaded = m, cfg.Now()
	return k, nil
}

// Key returns the key named id, reloading the keys first if id is
// unknown and the last load is at least MinRefresh old. A failed reload
// keeps the keys held.
func (k *Keys) Key(ctx context.Context, id string) (*ecdsa.PublicKey, bool) {
	k.mu.Lock()
	pub, ok := k.keys[id]
	k.mu.Unlock()
	if ok || id == "" {
		return pub, ok
	}
	k.fetch.Lock()
	defer k.fetch.Unlock()
	k.mu.Lock()
	pub, ok = k.keys[id]
	due := k.cfg.Now().Sub(k.loaded) >= k.cfg.MinRefresh
	if !ok && due {
		k.loaded = k.cfg.Now() // a failed reload also waits its turn
	}
	k.mu.Unlock()
	if ok || !due {
		return pub, ok
	}
	m, err := k.read(ctx)
	if err != nil {
		return nil, false
	}
	k.mu.Lock()
	k.keys = m
	pub, ok = m[id]
	k.mu.Unlock()
	return pub, ok
}

func (k *Keys) read(ctx context.Context) (map[string]*ecdsa.PublicKey, error) {
	var b []byte
	if k.cfg.File != "" {
		f, err := os.Open(k.cfg.File)
		if err != nil {
			return nil, fmt.Errorf("secretscan: signing keys: %w", err)
		}
		defer f.Close()
		if b, err = io.ReadAll(io.LimitReader(f, MaxKeysBytes+1)); err != nil {
			return nil, fmt.Errorf("secretscan: signing keys: %w", err)
		}
	} else {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.cfg.URL, nil)
		if err != nil {
			return nil, fmt.Errorf("secretscan: signing keys: %w", err)
		}
		req.Header.Set("Accept", "application/json")
		resp, err := k.cfg.Client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("secretscan: signing keys: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("secretscan: signing keys: %s answered %s", k.cfg.URL, resp.Status)
		}
		if b, err = io.ReadAll(io.LimitReader(resp.Body, MaxKeysBytes+1)); err != nil {
			return nil, fmt.Errorf("secretscan: signing keys: %w", err)
		}
	}
	if len(b) > MaxKeysBytes {
		return nil, fmt.Errorf("secretscan: signing keys: document over %d bytes", MaxKeysBytes)
	}
	return ParseKeys(b)
}
