package secretscan_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keygate/keygate/secretscan"
)

func TestParseAlert(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		n          int
		ok         bool
	}{
		{"github's example", `[{"token":"NMIfyYncKcRALEXAMPLE","type":"mycompany_api_token","url":"https://github.com/octocat/Hello-World/blob/12345600b9cbe38a219f39a9941c9319b600c002/foo/bar.txt","source":"content"}]`, 1, true},
		{"empty array", `[]`, 0, true},
		{"unknown member kept out", `[{"token":"a","extra":1}]`, 1, true},
		{"at the limit", `[{"token":"a"},{"token":"b"},{"token":"c"}]`, 3, true},
		{"over the limit", `[{"token":"a"},{"token":"b"},{"token":"c"},{"token":"d"}]`, 0, false},
		{"object", `{"token":"a"}`, 0, false},
		{"number token", `[{"token":1}]`, 0, false},
		{"trailing data", `[] []`, 0, false},
		{"unterminated", `[{"token":"a"}`, 0, false},
		{"empty", ``, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := secretscan.ParseAlert([]byte(tc.body), 3)
			if (err == nil) != tc.ok || len(ms) != tc.n {
				t.Fatalf("got %d matches, err %v", len(ms), err)
			}
		})
	}
	if _, err := secretscan.ParseAlert([]byte(`[{"token":"a"},{"token":"b"},{"token":"c"},{"token":"d"}]`), 3); !errors.Is(err, secretscan.ErrTooManyMatches) {
		t.Fatalf("err %v, want ErrTooManyMatches", err)
	}
}

// FuzzParseAlert: no body panics the parser, no result exceeds the limit,
// and no error message carries a token.
func FuzzParseAlert(f *testing.F) {
	f.Add([]byte(`[{"token":"svc_live_x","type":"t","url":"u","source":"s"}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"token":"a"},{"token":"b"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := secretscan.ParseAlert(b, 4)
		if len(ms) > 4 {
			t.Fatalf("%d matches over the limit", len(ms))
		}
		if err != nil {
			for _, m := range ms {
				if m.Token != "" && strings.Contains(err.Error(), m.Token) {
					t.Fatal("error carries a token")
				}
			}
		}
	})
}
