package tokenissuer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// StoredKey is one signing key as the Store keeps it. Private is the
// PKCS #8 private key; it leaves the Store only to sign, never in a log,
// a listing or the JWKS.
type StoredKey struct {
	Kid     string    `json:"kid"`
	Alg     string    `json:"alg"`
	Created time.Time `json:"created"`
	// Retiring, when set, is when the key stopped signing; it stays
	// published (and accepted) until Withdraw.
	Retiring time.Time `json:"retiring,omitzero"`
	// Withdraw, when set, is when the public key leaves the JWKS and its
	// tokens are refused: the retirement plus the longest token lifetime.
	Withdraw time.Time `json:"withdraw,omitzero"`
	Private  []byte    `json:"private"`
}

// String never shows the private key.
func (k StoredKey) String() string { return fmt.Sprintf("signing key %s (%s)", k.Kid, k.Alg) }

// GoString never shows the private key.
func (k StoredKey) GoString() string { return k.String() }

// KeyInfo is what `keygate token-keys list` shows of a key.
type KeyInfo struct {
	Kid      string    `json:"kid"`
	Alg      string    `json:"alg"`
	Created  time.Time `json:"created"`
	Retiring time.Time `json:"retiring,omitzero"`
	Withdraw time.Time `json:"withdraw,omitzero"`
	Signing  bool      `json:"signing"`
}

// newStoredKey makes a signing key for alg.
func newStoredKey(alg string, now time.Time) (StoredKey, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return StoredKey{}, fmt.Errorf("tokenissuer: unsupported algorithm %q", alg)
	}
	if err != nil {
		return StoredKey{}, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return StoredKey{}, err
	}
	var kid [12]byte
	if _, err := rand.Read(kid[:]); err != nil {
		return StoredKey{}, err
	}
	return StoredKey{Kid: base64.RawURLEncoding.EncodeToString(kid[:]), Alg: alg, Created: now.UTC().Truncate(time.Second), Private: der}, nil
}

// loadedKey is a stored key ready to sign or verify.
type loadedKey struct {
	StoredKey
	alg  jwa.SignatureAlgorithm
	priv jwk.Key
	pub  jwk.Key
	// thumb is the public key's RFC 7638 thumbprint (SHA-256): what the
	// cache of checked tokens remembers of the key that verified one.
	thumb [sha256.Size]byte
}

func loadKey(k StoredKey) (*loadedKey, error) {
	raw, err := x509.ParsePKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("tokenissuer: signing key %s: %w", k.Kid, err)
	}
	alg, ok := jwa.LookupSignatureAlgorithm(k.Alg)
	if !ok || (k.Alg != "ES256" && k.Alg != "EdDSA") {
		return nil, fmt.Errorf("tokenissuer: signing key %s: unsupported alg %q", k.Kid, k.Alg)
	}
	switch raw.(type) {
	case *ecdsa.PrivateKey:
		if k.Alg != "ES256" {
			return nil, fmt.Errorf("tokenissuer: signing key %s: an EC key for %s", k.Kid, k.Alg)
		}
	case ed25519.PrivateKey:
		if k.Alg != "EdDSA" {
			return nil, fmt.Errorf("tokenissuer: signing key %s: an Ed25519 key for %s", k.Kid, k.Alg)
		}
	default:
		return nil, fmt.Errorf("tokenissuer: signing key %s: unsupported key type", k.Kid)
	}
	priv, err := jwk.Import(raw)
	if err != nil {
		return nil, err
	}
	pub, err := jwk.PublicKeyOf(priv)
	if err != nil {
		return nil, err
	}
	for _, key := range []jwk.Key{priv, pub} {
		if err := errors.Join(key.Set(jwk.KeyIDKey, k.Kid), key.Set(jwk.AlgorithmKey, alg), key.Set(jwk.KeyUsageKey, "sig")); err != nil {
			return nil, err
		}
	}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil || len(tp) != sha256.Size {
		return nil, fmt.Errorf("tokenissuer: signing key %s: thumbprint: %v", k.Kid, err)
	}
	lk := &loadedKey{StoredKey: k, alg: alg, priv: priv, pub: pub}
	copy(lk.thumb[:], tp)
	return lk, nil
}

// keySet is an immutable view of the signing keys at one time.
type keySet struct {
	signer *loadedKey
	byKid  map[string]*loadedKey
	jwks   []byte // the public JWKS document
	infos  []KeyInfo
	// state is what the set was built from; nextWithdraw the earliest
	// withdrawal still to come (zero: none), when it must be rebuilt.
	state        State
	nextWithdraw time.Time
}

// sameKeys reports whether a and b hold the same keys in the same states.
func sameKeys(a, b State) bool {
	if len(a.Keys) != len(b.Keys) {
		return false
	}
	for i := range a.Keys {
		x, y := a.Keys[i], b.Keys[i]
		if x.Kid != y.Kid || x.Alg != y.Alg || !x.Retiring.Equal(y.Retiring) || !x.Withdraw.Equal(y.Withdraw) {
			return false
		}
	}
	return true
}

// buildKeySet loads the keys that are still published at now.
func buildKeySet(st State, now time.Time) (*keySet, error) {
	ks := &keySet{byKid: map[string]*loadedKey{}, state: st}
	pub := jwk.NewSet()
	for _, k := range st.Keys {
		if !k.Withdraw.IsZero() && !now.Before(k.Withdraw) {
			continue
		}
		lk, err := loadKey(k)
		if err != nil {
			return nil, err
		}
		ks.byKid[k.Kid] = lk
		if err := pub.AddKey(lk.pub); err != nil {
			return nil, err
		}
		if k.Retiring.IsZero() {
			ks.signer = lk
		}
		if !k.Withdraw.IsZero() && (ks.nextWithdraw.IsZero() || k.Withdraw.Before(ks.nextWithdraw)) {
			ks.nextWithdraw = k.Withdraw
		}
		ks.infos = append(ks.infos, KeyInfo{Kid: k.Kid, Alg: k.Alg, Created: k.Created, Retiring: k.Retiring, Withdraw: k.Withdraw, Signing: k.Retiring.IsZero()})
	}
	b, err := json.Marshal(pub)
	if err != nil {
		return nil, err
	}
	ks.jwks = b
	return ks, nil
}

// rotate retires the signing key(s) of st and adds a new one for alg.
// With now set (emergency), the retired keys are withdrawn at once;
// otherwise they stay published for overlap. Keys past their withdrawal
// are dropped.
func rotate(st *State, alg string, t time.Time, overlap time.Duration, immediately bool) (StoredKey, error) {
	nk, err := newStoredKey(alg, t)
	if err != nil {
		return StoredKey{}, err
	}
	kept := st.Keys[:0]
	for _, k := range st.Keys {
		if !k.Withdraw.IsZero() && !t.Before(k.Withdraw) {
			continue
		}
		if immediately {
			continue
		}
		if k.Retiring.IsZero() {
			k.Retiring = t.UTC().Truncate(time.Second)
			k.Withdraw = t.Add(overlap).UTC().Truncate(time.Second).Add(time.Second)
		}
		kept = append(kept, k)
	}
	st.Keys = append(kept, nk)
	return nk, nil
}

// signing is the key of st that signs now, if any.
func signing(st State) (StoredKey, bool) {
	for _, k := range st.Keys {
		if k.Retiring.IsZero() {
			return k, true
		}
	}
	return StoredKey{}, false
}
