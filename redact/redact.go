// Package redact masks credentials in text bound for logs: API keys
// (svc_live_… and svc_test_…) and admin tokens (kga_…), the prefix matched
// in any case, bearer tokens ("Bearer <token>") and JWT-shaped strings
// (eyJ….….…). Core wraps
// a zapcore.Core so that every message and field of a logger is redacted
// before it is encoded, whatever the call site logs.
//
// Text without anything to mask is returned as it is, without allocating
// and without regular expressions; the scan is a few byte searches.
package redact

import "strings"

// Mask replaces each secret (an API key's random part, a bearer token, a
// JWT).
const Mask = "[REDACTED]"

// String returns s with every secret replaced by Mask; s itself when it
// holds none. An API key keeps its prefix (svc_live_[REDACTED]), so the log
// still says what was sent.
func String(s string) string {
	start, end := next(s, 0)
	if start < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for start >= 0 {
		b.WriteString(s[last:start])
		b.WriteString(Mask)
		last = end
		start, end = next(s, end)
	}
	b.WriteString(s[last:])
	return b.String()
}

// Contains reports whether s holds something String would mask.
func Contains(s string) bool {
	start, _ := next(s, 0)
	return start >= 0
}

// next returns the span [start, end) of the first secret in s at or after
// from, or -1.
func next(s string, from int) (start, end int) {
	if len(s)-from < 6 { // shorter than any secret ("eyJ.x.")
		return -1, -1
	}
	start, end = findKey(s, from)
	if st, en := findJWT(s, from); st >= 0 && (start < 0 || st < start) {
		start, end = st, en
	}
	if st, en := findBearer(s, from); st >= 0 && (start < 0 || st < start) {
		start, end = st, en
	}
	return start, end
}

// findKey finds svc_live_ or svc_test_ (an API key) or kga_ (an admin
// token), in any case, followed by at least one alphanumeric; the span is
// the alphanumerics.
func findKey(s string, from int) (int, int) {
	for i := from; i < len(s); {
		j := strings.IndexByte(s[i:], '_')
		if j < 0 {
			return -1, -1
		}
		u := i + j // s[u] == '_' after "svc" or "kga"
		i = u + 1
		if u < 3 {
			continue
		}
		st := u + 6
		switch {
		case foldEq(s[u-3:u], "kga"): // an admin token
			st = u + 1
		case !foldEq(s[u-3:u], "svc") || len(s) < u+7:
			continue
		default:
			if env := s[u+1 : u+6]; !foldEq(env, "live_") && !foldEq(env, "test_") {
				continue
			}
		}
		en := st
		for en < len(s) && isAlnum(s[en]) {
			en++
		}
		if en > st {
			return st, en
		}
	}
	return -1, -1
}

// findJWT finds eyJ<b64url>.<b64url>.[<b64url>]: a JWS or an unsigned JWT
// in compact form. The span is all of it.
func findJWT(s string, from int) (int, int) {
	for i := from; i < len(s); {
		j := strings.Index(s[i:], "eyJ")
		if j < 0 {
			return -1, -1
		}
		st := i + j
		i = st + 3
		if st > 0 && isB64URL(s[st-1]) {
			continue // inside another word
		}
		en := st + 3
		dots := 0
		for en < len(s) && (isB64URL(s[en]) || (s[en] == '.' && dots < 2)) {
			if s[en] == '.' {
				dots++
			}
			en++
		}
		if dots == 2 {
			return st, en
		}
	}
	return -1, -1
}

// findBearer finds "Bearer" (any case), blanks, then a token68; the span
// is the token. "Bearer realm=…" (an auth-param, not a token) is left. It
// looks at the blanks, which a byte search finds fast.
func findBearer(s string, from int) (int, int) {
	st, en := findBearerAfter(s, from, ' ')
	if st2, en2 := findBearerAfter(s, from, '\t'); st2 >= 0 && (st < 0 || st2 < st) {
		st, en = st2, en2
	}
	return st, en
}

// findBearerAfter is findBearer for "bearer" followed by blank.
func findBearerAfter(s string, from int, blank byte) (int, int) {
	for i := from; i < len(s); {
		j := strings.IndexByte(s[i:], blank)
		if j < 0 {
			return -1, -1
		}
		b := i + j // first blank after "bearer"
		i = b + 1
		if b < 6 || s[b-1]|0x20 != 'r' || !foldEq(s[b-6:b], "bearer") {
			continue
		}
		st := b
		for st < len(s) && (s[st] == ' ' || s[st] == '\t') {
			st++
		}
		en := st
		for en < len(s) && isToken68(s[en]) {
			en++
		}
		if en == st {
			continue
		}
		eq := en
		for en < len(s) && s[en] == '=' {
			en++
		}
		if en > eq && en < len(s) && (isToken68(s[en]) || s[en] == '"') {
			continue // name=value
		}
		return st, en
	}
	return -1, -1
}

// foldEq compares s with the lower-case ASCII t, ignoring case.
func foldEq(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != t[i] {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isB64URL(c byte) bool { return isAlnum(c) || c == '-' || c == '_' }

func isToken68(c byte) bool {
	return isB64URL(c) || c == '.' || c == '~' || c == '+' || c == '/'
}
