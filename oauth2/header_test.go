package oauth2

import (
	"strings"
	"testing"
)

func TestParseAuthorization(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		token  string
		result headerResult
	}{
		{"none", nil, "", headerMissing},
		{"bearer", []string{"Bearer abc.def.ghi"}, "abc.def.ghi", headerOK},
		{"mixed-case scheme", []string{"bEaReR abc"}, "abc", headerOK},
		{"token68 padding", []string{"Bearer ab+/c~-._=="}, "ab+/c~-._==", headerOK},
		{"padding in the middle", []string{"Bearer ab=c"}, "", headerMalformed},
		{"only padding", []string{"Bearer =="}, "", headerMalformed},
		{"empty value", []string{""}, "", headerMalformed},
		{"scheme alone", []string{"Bearer"}, "", headerMalformed},
		{"scheme and space", []string{"Bearer "}, "", headerMalformed},
		{"tab separator", []string{"Bearer\tabc"}, "", headerNotBearer},
		{"two spaces", []string{"Bearer  abc"}, "", headerMalformed},
		{"trailing space", []string{"Bearer abc "}, "", headerMalformed},
		{"two tokens", []string{"Bearer abc def"}, "", headerMalformed},
		{"comma list", []string{"Bearer abc, Basic x"}, "", headerMalformed},
		{"non-ascii", []string{"Bearer abc\u00e9"}, "", headerMalformed},
		{"basic", []string{"Basic abc"}, "", headerNotBearer},
		{"bearerx scheme", []string{"Bearerx abc"}, "", headerNotBearer},
		{"two headers", []string{"Bearer a", "Bearer b"}, "", headerDuplicate},
		{"too long", []string{"Bearer " + strings.Repeat("a", maxTokenLen+1)}, "", headerMalformed},
		{"longest allowed", []string{"Bearer " + strings.Repeat("a", maxTokenLen)}, strings.Repeat("a", maxTokenLen), headerOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok, res := parseAuthorization(tc.values)
			if tok != tc.token || res != tc.result {
				t.Fatalf("parseAuthorization(%q) = %q, %d; want %q, %d", tc.values, tok, res, tc.token, tc.result)
			}
		})
	}
}

func FuzzParseAuthorization(f *testing.F) {
	for _, s := range []string{"Bearer abc.def.ghi", "bearer x==", "Basic dXNlcjpwYXNz", "Bearer", "Bearer  a", "", "Bearer a b", "Bearer =a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok, res := parseAuthorization([]string{v})
		if res == headerOK {
			if !hasBearerScheme(v) || v[7:] != tok || tok == "" || len(tok) > maxTokenLen {
				t.Fatalf("accepted %q as token %q", v, tok)
			}
			for i := 0; i < len(tok); i++ {
				if c := tok[i]; c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == '\\' {
					t.Fatalf("token %q holds byte %q", tok, c)
				}
			}
		} else if tok != "" {
			t.Fatalf("result %d with token %q", res, tok)
		}
		if (res == headerNotBearer) == hasBearerScheme(v) && v != "" {
			t.Fatalf("%q: result %d disagrees with hasBearerScheme", v, res)
		}
		if id := sanitizeID(v); !isSafeValue(id[len(idPrefix):]) && v != "" {
			t.Fatalf("sanitizeID(%q) = %q is not safe", v, id)
		}
	})
}
