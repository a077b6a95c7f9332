package portal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"time"
)

// issuedFlash is a new key waiting for the one page that shows it. A
// create or rotate answers its POST with a redirect (POST-redirect-GET),
// so that a reload repeats nothing; the key crosses the redirect here,
// server-side, never in a URL.
type issuedFlash struct {
	Key   string        `json:"key"`
	ID    string        `json:"id"` // the key's record id
	How   string        `json:"how"`
	Grace time.Duration `json:"grace"`
}

// flashTTL bounds how long a new key waits for its page: the redirect is
// followed at once, so this only reclaims one that never was.
const flashTTL = 5 * time.Minute

// errNoFlash means the flash was shown already, or never made for this
// session.
var errNoFlash = errors.New("portal: no such flash")

// flashKey is the kv key of a flash: the hash of the session token and
// the flash's handle together, so only the session that made it can take
// it.
func flashKey(token, handle string) string { return storeKey("flash", token+"\x00"+handle) }

// flashCipher is the AEAD a flash is sealed with. Its key derives from
// the session token, which the store never holds (only its hash): a copy
// of the store (Redis) does not reveal a key in flight.
func flashCipher(token, handle string) cipher.AEAD {
	k := sha256.Sum256([]byte("keygate portal flash\x00" + token + "\x00" + handle))
	block, _ := aes.NewCipher(k[:]) // 32 bytes: never fails
	aead, _ := cipher.NewGCM(block)
	return aead
}

// putFlash keeps f for the session of token and returns its handle, the
// last segment of the page's URL.
func (p *Portal) putFlash(ctx context.Context, token string, f issuedFlash) (string, error) {
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	handle := newSecret()
	aead := flashCipher(token, handle)
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	return handle, p.kv.put(ctx, flashKey(token, handle), aead.Seal(nonce, nonce, b, nil), flashTTL)
}

// takeFlash returns the flash of handle for the session of token and
// forgets it: it is shown once.
func (p *Portal) takeFlash(ctx context.Context, token, handle string) (issuedFlash, error) {
	sealed, ok, err := p.kv.take(ctx, flashKey(token, handle))
	if err != nil {
		return issuedFlash{}, err
	}
	if !ok {
		return issuedFlash{}, errNoFlash
	}
	aead := flashCipher(token, handle)
	if len(sealed) < aead.NonceSize() {
		return issuedFlash{}, errNoFlash
	}
	b, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], nil)
	var f issuedFlash
	if err != nil || json.Unmarshal(b, &f) != nil {
		return issuedFlash{}, errNoFlash
	}
	return f, nil
}
