package formctx

import (
	"bytes"
	"mime"
	"testing"
)

// refFormBoundary is formBoundary as it was before it parsed the string
// in place: the header copied to a []byte, parsed by refParseValue (the
// []byte parser of that version, kept here verbatim), the boundary copied
// back to a string. FuzzFormBoundary holds today's to it.
func refFormBoundary(contentType string) (string, bool) {
	var ps [maxParams]refParam
	typ, n, ok := refParseValue(refTrimOWS([]byte(contentType)), true, &ps)
	if !ok || !equalFold(typ, "multipart/form-data") {
		return "", false
	}
	var boundary []byte
	for _, p := range ps[:n] {
		switch {
		case string(p.name) == "boundary":
			boundary = p.value
		case equalFold(p.name, "charset"):
			if !equalFold(p.value, "utf-8") && !equalFold(p.value, "us-ascii") {
				return "", false
			}
		default:
			return "", false
		}
	}
	if len(boundary) == 0 || len(boundary) > maxBoundaryLen || boundary[len(boundary)-1] == ' ' {
		return "", false
	}
	for _, c := range boundary {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			continue
		}
		switch c {
		case '\'', '(', ')', '+', '_', ',', '-', '.', '/', ':', '=', '?', ' ':
			continue
		}
		return "", false
	}
	return string(boundary), true
}

type refParam struct {
	name, value []byte
	quoted      bool
}

func refTokenEnd(s []byte, i int) int {
	for i < len(s) && isTchar(s[i]) {
		i++
	}
	return i
}

func refParseValue(s []byte, slash bool, ps *[maxParams]refParam) (typ []byte, n int, ok bool) {
	i := refTokenEnd(s, 0)
	if i == 0 {
		return nil, 0, false
	}
	if slash {
		if i >= len(s) || s[i] != '/' {
			return nil, 0, false
		}
		j := refTokenEnd(s, i+1)
		if j == i+1 {
			return nil, 0, false
		}
		i = j
	}
	typ = s[:i]
	for i < len(s) {
		if s[i] != ';' {
			return nil, 0, false
		}
		i++
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		j := refTokenEnd(s, i)
		if j == i || j >= len(s) || s[j] != '=' {
			return nil, 0, false
		}
		p := refParam{name: s[i:j]}
		i = j + 1
		if i < len(s) && s[i] == '"' {
			k := i + 1
			for ; k < len(s) && s[k] != '"'; k++ {
				if c := s[k]; c == '\\' || c < 0x20 && c != '\t' || c == 0x7f {
					return nil, 0, false
				}
			}
			if k >= len(s) {
				return nil, 0, false
			}
			p.value, p.quoted = s[i+1:k], true
			i = k + 1
		} else {
			j = refTokenEnd(s, i)
			if j == i {
				return nil, 0, false
			}
			p.value = s[i:j]
			i = j
		}
		if n == len(ps) {
			return nil, 0, false
		}
		for _, q := range ps[:n] {
			if equalFold(q.name, p.name) {
				return nil, 0, false
			}
		}
		ps[n] = p
		n++
	}
	return typ, n, true
}

func refTrimOWS(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// boundaryCases are Content-Types an attacker would try: quoted and
// unquoted boundaries, case, parameters twice, whitespace everywhere,
// trailing ";", quoted-pairs, controls, RFC 2231 names, other types.
var boundaryCases = []struct {
	ct       string
	boundary string // "" when refused
}{
	{"multipart/form-data; boundary=abc", "abc"},
	{"multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW", "----WebKitFormBoundary7MA4YWxkTrZu0gW"},
	{"multipart/form-data;boundary=abc", "abc"},
	{"multipart/form-data;\tboundary=abc", "abc"},
	{"  multipart/form-data; boundary=abc \t", "abc"},
	{"MULTIPART/Form-Data; boundary=abc", "abc"},
	{`multipart/form-data; boundary="a b:c?"`, "a b:c?"},
	{`multipart/form-data; boundary="abc"; charset=UTF-8`, "abc"},
	{`multipart/form-data; charset="us-ascii"; boundary=abc`, "abc"},
	{"multipart/form-data; boundary=abc; charset=latin1", ""},
	{"multipart/form-data; Boundary=abc", ""},
	{"multipart/form-data; BOUNDARY=abc", ""},
	{"multipart/form-data; boundary=abc; boundary=abd", ""},
	{"multipart/form-data; boundary=abc; Boundary=abd", ""},
	{"multipart/form-data; boundary=abc;", ""},
	{"multipart/form-data; boundary=abc ;", ""},
	{"multipart/form-data; boundary =abc", ""},
	{"multipart/form-data; boundary= abc", ""},
	{"multipart/form-data ; boundary=abc", ""},
	{"multipart/form-data; boundary=", ""},
	{`multipart/form-data; boundary=""`, ""},
	{`multipart/form-data; boundary="abc`, ""},
	{`multipart/form-data; boundary="a\"bc"`, ""},
	{`multipart/form-data; boundary="a\bc"`, ""},
	{"multipart/form-data; boundary=\"a\x00bc\"", ""},
	{"multipart/form-data; boundary=\"a\rbc\"", ""},
	{`multipart/form-data; boundary="abc "`, ""},
	{`multipart/form-data; boundary="ab{c"`, ""},
	{"multipart/form-data; boundary=ab\xffc", ""},
	{"multipart/form-data; boundary=\"ab\xc3\xa9c\"", ""},
	{"multipart/form-data; boundary*=utf-8''abc", ""},
	{"multipart/form-data; boundary*0=abc", ""},
	{"multipart/form-data; name=x; boundary=abc", ""},
	{"multipart/form-data", ""},
	{"multipart/mixed; boundary=abc", ""},
	{"multipart/form-data-x; boundary=abc", ""},
	{"application/x-www-form-urlencoded", ""},
	{"multipart/form-data, boundary=abc", ""},
	{"", ""},
	{"multipart/form-data; boundary=" + string(bytes.Repeat([]byte("b"), 70)), string(bytes.Repeat([]byte("b"), 70))},
	{"multipart/form-data; boundary=" + string(bytes.Repeat([]byte("b"), 71)), ""},
	{"multipart/form-data; a=1; b=2; c=3; d=4; e=5; f=6; g=7; h=8; boundary=abc", ""},
}

func TestFormBoundary(t *testing.T) {
	t.Parallel()
	for _, c := range boundaryCases {
		got, ok := formBoundary(c.ct)
		if ok != (c.boundary != "") || got != c.boundary {
			t.Errorf("formBoundary(%q) = %q, %v; want %q", c.ct, got, ok, c.boundary)
		}
		checkFormBoundary(t, c.ct)
	}
}

func TestFormBoundaryDoesNotAllocate(t *testing.T) {
	ct := "multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW"
	if n := testing.AllocsPerRun(100, func() { _, _ = formBoundary(ct) }); n != 0 {
		t.Errorf("formBoundary allocates %v times", n)
	}
}

// FuzzFormBoundary holds formBoundary to the parser it replaced (same
// answer, same boundary, for every input), and to mime.ParseMediaType:
// whatever formBoundary accepts, the standard library reads as
// multipart/form-data with the same boundary (formBoundary is the stricter).
func FuzzFormBoundary(f *testing.F) {
	for _, c := range boundaryCases {
		f.Add(c.ct)
	}
	f.Fuzz(func(t *testing.T, ct string) { checkFormBoundary(t, ct) })
}

func checkFormBoundary(t *testing.T, ct string) {
	t.Helper()
	got, ok := formBoundary(ct)
	want, wantOK := refFormBoundary(ct)
	if got != want || ok != wantOK {
		t.Fatalf("formBoundary(%q) = %q, %v; the previous parser: %q, %v", ct, got, ok, want, wantOK)
	}
	if !ok {
		return
	}
	typ, params, err := mime.ParseMediaType(ct)
	if err != nil || typ != "multipart/form-data" || params["boundary"] != got {
		t.Fatalf("formBoundary(%q) = %q, but mime.ParseMediaType: %q %q %v", ct, got, typ, params, err)
	}
}
