// Package jwscheck reads a compact JWS the strict way, before its
// signature is checked, so that one token has exactly one valid spelling
// and no field is read one way here and another way elsewhere. Both of
// keygate's bearer-token verifiers (its own issuer's, package tokenissuer,
// and the external issuer's, package oauth2) run Check first.
//
// Check refuses:
//   - anything but three base64url segments, or a segment that is not the
//     canonical base64url of its bytes (padding, the '+' and '/' alphabet,
//     line breaks, non-zero trailing bits: RFC 7515 §2 and RFC 4648 §3.5);
//   - a header or claims set that is not one JSON object, or that names a
//     member twice, or that is not valid UTF-8 (RFC 7515 §4, RFC 7519 §4);
//   - a crit header of any shape: keygate understands no JWS extension,
//     and RFC 7515 §4.1.11 says a recipient must then refuse the token;
//   - exp, nbf or iat that is not a JSON number (RFC 7519 §2 NumericDate);
//   - a lifetime (exp after iat, or after now without iat) over
//     Options.MaxLifetime;
//   - with Options.LowS, an ECDSA signature whose s is above half the
//     curve order (its twin n−s verifies too: a second spelling).
package jwscheck

import (
	"crypto/elliptic"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Options says what Check requires beyond the spelling.
type Options struct {
	// LowS refuses ECDSA signatures (ES256, ES384, ES512) whose s is
	// above half the curve order. Only for tokens whose signer
	// normalises s (see LowS); other signers emit either half.
	LowS bool
	// RequireTimes requires exp, nbf and iat, all three.
	RequireTimes bool
	// MaxLifetime, when positive, caps exp − iat; a token without iat is
	// capped at exp − Now() instead.
	MaxLifetime time.Duration
	// Leeway is added to MaxLifetime for a token without iat (clock skew).
	Leeway time.Duration
	// Now is the clock for a token without iat; nil means time.Now.
	Now func() time.Time
}

// Errors of Check, for the caller's debug log: the client only ever hears
// that the token is invalid.
var (
	ErrSegments  = errors.New("jws: not three base64url segments")
	ErrEncoding  = errors.New("jws: a segment is not canonical base64url")
	ErrHeader    = errors.New("jws: header is not one JSON object with unique members")
	ErrClaims    = errors.New("jws: claims are not one JSON object with unique members")
	ErrCrit      = errors.New("jws: crit names an extension keygate does not understand")
	ErrTime      = errors.New("jws: exp, nbf or iat is not a JSON number")
	ErrNoTime    = errors.New("jws: exp, nbf or iat is missing")
	ErrLifetime  = errors.New("jws: lifetime is over the maximum")
	ErrHighS     = errors.New("jws: ECDSA signature s is above half the curve order")
	ErrSignature = errors.New("jws: ECDSA signature has the wrong length")
)

// Check reads raw as a compact JWS strictly (see the package doc).
func Check(raw string, o Options) error {
	h64, rest, ok := strings.Cut(raw, ".")
	if !ok {
		return ErrSegments
	}
	p64, s64, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(s64, ".") || h64 == "" || p64 == "" || s64 == "" {
		return ErrSegments
	}
	hdr, err := decode(h64)
	if err != nil {
		return err
	}
	payload, err := decode(p64)
	if err != nil {
		return err
	}
	sig, err := decode(s64)
	if err != nil {
		return err
	}
	var h map[string]jsontext.Value
	if json.Unmarshal(hdr, &h) != nil || h == nil {
		return ErrHeader
	}
	if _, ok := h["crit"]; ok {
		return ErrCrit
	}
	var c map[string]jsontext.Value
	if json.Unmarshal(payload, &c) != nil || c == nil {
		return ErrClaims
	}
	if err := checkTimes(c, o); err != nil {
		return err
	}
	if o.LowS {
		var alg string
		if v, ok := h["alg"]; ok {
			_ = json.Unmarshal(v, &alg)
		}
		if err := checkLowS(alg, sig); err != nil {
			return err
		}
	}
	return nil
}

// decode decodes one segment, refusing any spelling but the canonical one:
// the url alphabet only (no padding, no line breaks, which Go's decoder
// would skip), and zero trailing bits (Strict).
func decode(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, ErrEncoding
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, ErrEncoding
	}
	return b, nil
}

// numericDate reads a NumericDate member: a JSON number, nothing else.
func numericDate(c map[string]jsontext.Value, name string) (float64, bool, error) {
	v, ok := c[name]
	if !ok {
		return 0, false, nil
	}
	if v.Kind() != '0' {
		return 0, true, fmt.Errorf("%w: %s is a JSON %s", ErrTime, name, kindName(v.Kind()))
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, true, fmt.Errorf("%w: %s is out of range", ErrTime, name)
	}
	return f, true, nil
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}

func checkTimes(c map[string]jsontext.Value, o Options) error {
	exp, hasExp, err := numericDate(c, "exp")
	if err != nil {
		return err
	}
	_, hasNbf, err := numericDate(c, "nbf")
	if err != nil {
		return err
	}
	iat, hasIat, err := numericDate(c, "iat")
	if err != nil {
		return err
	}
	if o.RequireTimes && !(hasExp && hasNbf && hasIat) {
		return ErrNoTime
	}
	if o.MaxLifetime <= 0 || !hasExp {
		return nil
	}
	max := o.MaxLifetime.Seconds()
	if hasIat {
		if exp-iat > max {
			return fmt.Errorf("%w: exp is %.0fs after iat, at most %.0fs", ErrLifetime, exp-iat, max)
		}
		return nil
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	left := exp - float64(now().UnixNano())/1e9
	if left > max+o.Leeway.Seconds() {
		return fmt.Errorf("%w: exp is %.0fs from now and there is no iat, at most %.0fs", ErrLifetime, left, max)
	}
	return nil
}

// curveOf is the curve of an ECDSA JWS alg, nil for other algs.
func curveOf(alg string) elliptic.Curve {
	switch alg {
	case "ES256":
		return elliptic.P256()
	case "ES384":
		return elliptic.P384()
	case "ES512":
		return elliptic.P521()
	}
	return nil
}

// checkLowS refuses an ECDSA signature (r‖s, RFC 7518 §3.4) whose s is
// above n/2. Other algs pass: Ed25519 verification already refuses a
// non-canonical s, and RSA signatures have one spelling.
func checkLowS(alg string, sig []byte) error {
	curve := curveOf(alg)
	if curve == nil {
		return nil
	}
	size := (curve.Params().BitSize + 7) / 8
	if len(sig) != 2*size {
		return ErrSignature
	}
	s := new(big.Int).SetBytes(sig[size:])
	half := new(big.Int).Rsh(curve.Params().N, 1)
	if s.Cmp(half) > 0 {
		return ErrHighS
	}
	return nil
}

// LowS rewrites the ECDSA signature of the compact JWS tok so that s is at
// most half the curve order (n−s verifies as s does), which is the one
// spelling Check with LowS accepts. Tokens of other algs come back as
// they are.
func LowS(alg, tok string) (string, error) {
	curve := curveOf(alg)
	i := strings.LastIndexByte(tok, '.')
	if curve == nil || i < 0 {
		return tok, nil
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(tok[i+1:])
	if err != nil {
		return "", err
	}
	size := (curve.Params().BitSize + 7) / 8
	if len(sig) != 2*size {
		return "", ErrSignature
	}
	n := curve.Params().N
	s := new(big.Int).SetBytes(sig[size:])
	if s.Cmp(new(big.Int).Rsh(n, 1)) <= 0 {
		return tok, nil
	}
	s.Sub(n, s).FillBytes(sig[size:])
	return tok[:i+1] + base64.RawURLEncoding.EncodeToString(sig), nil
}
