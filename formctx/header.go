package formctx

import "bytes"

// maxParams bounds the parameters of one header value; more is refused.
const maxParams = 8

// text is a header value as the parsers below take it: a part's header
// line ([]byte) or the request's Content-Type (string, parsed in place so
// that the boundary is a substring of it and nothing is copied).
type text interface{ ~string | ~[]byte }

// param is one parameter of a header value, sliced from the value.
type param[S text] struct {
	name, value S
	quoted      bool
}

// isTchar reports whether c is an RFC 9110 token character.
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

func tokenEnd[S text](s S, i int) int {
	for i < len(s) && isTchar(s[i]) {
		i++
	}
	return i
}

// parseValue parses a header value in the one form keygate accepts:
//
//	value  = type [ "/" subtype ] *( ";" *( SP / HTAB ) param )
//	param  = token "=" ( token / quoted-string )
//
// where a quoted-string has no backslash (no quoted-pairs: parsers disagree
// on them) and no control character but HTAB. No whitespace is allowed
// before ";" or around "=", parameter names must not repeat (compared
// ASCII case-insensitively) and there are at most maxParams of them. The
// caller trims the value's leading and trailing whitespace. ok is false for
// anything else.
func parseValue[S text](s S, slash bool, ps *[maxParams]param[S]) (typ S, n int, ok bool) {
	i := tokenEnd(s, 0)
	if i == 0 {
		return s[:0], 0, false
	}
	if slash {
		if i >= len(s) || s[i] != '/' {
			return s[:0], 0, false
		}
		j := tokenEnd(s, i+1)
		if j == i+1 {
			return s[:0], 0, false
		}
		i = j
	}
	typ = s[:i]
	for i < len(s) {
		if s[i] != ';' {
			return s[:0], 0, false
		}
		i++
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		j := tokenEnd(s, i)
		if j == i || j >= len(s) || s[j] != '=' {
			return s[:0], 0, false
		}
		p := param[S]{name: s[i:j]}
		i = j + 1
		if i < len(s) && s[i] == '"' {
			k := i + 1
			for ; k < len(s) && s[k] != '"'; k++ {
				if c := s[k]; c == '\\' || c < 0x20 && c != '\t' || c == 0x7f {
					return s[:0], 0, false
				}
			}
			if k >= len(s) {
				return s[:0], 0, false
			}
			p.value, p.quoted = s[i+1:k], true
			i = k + 1
		} else {
			j = tokenEnd(s, i)
			if j == i {
				return s[:0], 0, false
			}
			p.value = s[i:j]
			i = j
		}
		if n == len(ps) {
			return s[:0], 0, false
		}
		for _, q := range ps[:n] {
			if equalFold(q.name, p.name) {
				return s[:0], 0, false
			}
		}
		ps[n] = p
		n++
	}
	return typ, n, true
}

// equalFold compares ASCII case-insensitively.
func equalFold[A, B ~string | ~[]byte](a A, b B) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// EqualContext reports whether two context identifiers are equal, ASCII
// case-insensitively. Unlike strings.EqualFold it folds no other letters
// (such as the Kelvin sign to "k"), so only what an ASCII comparison in any
// upstream would call equal is equal.
func EqualContext(a, b string) bool { return equalFold(a, b) }

func trimOWS[S text](s S) S {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// formBoundary returns the boundary of a multipart/form-data content type.
// The type must be in parseValue's form, with exactly one parameter named
// "boundary" (in lower case: PHP looks for the first "boundary" anywhere in
// the header) and at most a charset of utf-8 or us-ascii besides; the
// boundary must be 1 to 70 RFC 2046 bchars not ending in a space.
func formBoundary(contentType string) (string, bool) {
	var ps [maxParams]param[string]
	typ, n, ok := parseValue(trimOWS(contentType), true, &ps)
	if !ok || !equalFold(typ, "multipart/form-data") {
		return "", false
	}
	var boundary string
	for _, p := range ps[:n] {
		switch {
		case p.name == "boundary":
			boundary = p.value
		case equalFold(p.name, "charset"):
			if !equalFold(p.value, "utf-8") && !equalFold(p.value, "us-ascii") {
				return "", false // a parser may decode fields in it
			}
		default:
			// PHP takes the boundary from the first "boundary" in the
			// header (case-sensitively first), so no other parameter,
			// and the name in lower case.
			return "", false
		}
	}
	if !validBoundary(boundary) {
		return "", false
	}
	return boundary, true
}

func validBoundary(b string) bool {
	if len(b) == 0 || len(b) > maxBoundaryLen || b[len(b)-1] == ' ' {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			continue
		}
		switch c {
		case '\'', '(', ')', '+', '_', ',', '-', '.', '/', ':', '=', '?', ' ':
			continue
		}
		return false
	}
	return true
}

// partHeaders checks a part's header block (the lines after the delimiter,
// each ending in CRLF, without the empty line) and reports whether the part
// is a context part.
func partHeaders(blk []byte) (isCtx bool, err error) {
	var cd, ct, cte []byte
	var haveCD, haveCT, haveCTE bool
	for len(blk) > 0 {
		i := bytes.IndexByte(blk, '\n')
		if i < 1 || blk[i-1] != '\r' {
			return false, ErrPartHeader
		}
		line := blk[:i-1]
		blk = blk[i+1:]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || tokenEnd(line, 0) != colon { // also refuses obs-fold
			return false, ErrPartHeader
		}
		name, val := line[:colon], line[colon+1:]
		for _, c := range val {
			if c < 0x20 && c != '\t' || c == 0x7f {
				return false, ErrPartHeader
			}
		}
		val = trimOWS(val)
		switch {
		case equalFold(name, "content-disposition"):
			if haveCD {
				return false, ErrDisposition
			}
			cd, haveCD = val, true
		case equalFold(name, "content-type"):
			if haveCT {
				return false, ErrPartHeader
			}
			ct, haveCT = val, true
		case equalFold(name, "content-transfer-encoding"):
			if haveCTE {
				return false, ErrPartHeader
			}
			cte, haveCTE = val, true
		}
	}
	// RFC 7578 section 4.2: every part has a Content-Disposition of type
	// form-data naming its field. werkzeug refuses a part without one, and
	// reads the body of a part with no header lines at all as its headers,
	// so neither may pass.
	if !haveCD {
		return false, ErrDisposition
	}
	var ps [maxParams]param[[]byte]
	typ, n, ok := parseValue(cd, false, &ps)
	if !ok || !equalFold(typ, "form-data") {
		return false, ErrDisposition
	}
	var name []byte
	var hasName, hasFile bool
	for _, p := range ps[:n] {
		switch {
		case equalFold(p.name, "name"):
			name, hasName = p.value, true
		case len(p.name) >= 5 && equalFold(p.name[:5], "name*"):
			// RFC 8187 and RFC 2231 names: Go and werkzeug decode them,
			// busboy ignores them, so the same part has a different name
			// to each.
			return false, ErrFieldName
		case equalFold(p.name, "filename"), len(p.name) > 9 && equalFold(p.name[:9], "filename*"):
			hasFile = true
		}
	}
	if !hasName || !validName(name) {
		return false, ErrFieldName
	}
	if i := bytes.IndexByte(name, '['); i >= 0 && equalFold(name[:i], "contextid") {
		return false, ErrFieldName // PHP reads contextId[...] as contextId
	}
	isCtx = equalFold(name, "contextid")
	if isCtx && hasFile {
		return false, ErrContextPart
	}
	if haveCT {
		typ, n, ok := parseValue(ct, true, &ps)
		if !ok {
			return false, ErrPartHeader
		}
		if len(typ) >= 10 && equalFold(typ[:10], "multipart/") {
			return false, ErrPartHeader
		}
		if isCtx {
			if !equalFold(typ, "text/plain") {
				return false, ErrContextPart
			}
			for _, p := range ps[:n] {
				if !equalFold(p.name, "charset") || !equalFold(p.value, "utf-8") && !equalFold(p.value, "us-ascii") {
					return false, ErrContextPart
				}
			}
		}
	}
	if haveCTE {
		typ, n, ok := parseValue(cte, false, &ps)
		if !ok || n != 0 {
			return false, ErrPartHeader
		}
		if isCtx && !equalFold(typ, "7bit") && !equalFold(typ, "8bit") && !equalFold(typ, "binary") {
			return false, ErrContextPart
		}
	}
	return isCtx, nil
}

// validName reports whether a form field name is one every parser reads
// alike: printable ASCII without spaces, backslashes or percent signs, and
// without the separators ";", "=" and "," that a naive header splitter
// would cut at.
func validName(name []byte) bool {
	for _, c := range name {
		switch {
		case c <= ' ' || c >= 0x7f, c == '\\', c == '%', c == '"', c == ';', c == '=', c == ',':
			return false
		}
	}
	return true
}
