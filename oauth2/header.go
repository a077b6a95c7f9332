package oauth2

import "strings"

// maxTokenLen caps the bearer token accepted from a header.
const maxTokenLen = 8 << 10

// headerResult classifies the Authorization header(s) of a request.
type headerResult int

const (
	headerOK        headerResult = iota // one Bearer token, well formed
	headerMissing                       // no Authorization header
	headerDuplicate                     // more than one Authorization header
	headerNotBearer                     // another scheme (Basic, ...)
	headerMalformed                     // Bearer, but not exactly one token68
)

// parseAuthorization extracts the bearer token from the values of the
// Authorization header. The scheme is matched case-insensitively; exactly
// one space separates it from a single token68 (RFC 7235 §2.1, RFC 6750
// §2.1). The token is returned only with headerOK.
func parseAuthorization(values []string) (string, headerResult) {
	switch len(values) {
	case 0:
		return "", headerMissing
	case 1:
	default:
		return "", headerDuplicate
	}
	v := values[0]
	if !hasBearerScheme(v) {
		if v == "" {
			return "", headerMalformed
		}
		return "", headerNotBearer
	}
	if len(v) < len("bearer ")+1 {
		return "", headerMalformed
	}
	tok := v[len("bearer "):]
	if len(tok) > maxTokenLen || !isToken68(tok) {
		return "", headerMalformed
	}
	return tok, headerOK
}

// hasBearerScheme reports whether v starts with the Bearer scheme: the
// word itself (any case), alone or followed by a space.
func hasBearerScheme(v string) bool {
	const s = "bearer"
	if len(v) < len(s) || !strings.EqualFold(v[:len(s)], s) {
		return false
	}
	return len(v) == len(s) || v[len(s)] == ' '
}

// isToken68 reports whether s is a token68: 1*( ALPHA / DIGIT / "-" / "." /
// "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		switch c {
		case '-', '.', '_', '~', '+', '/':
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
