package gateway

import (
	"net/http/httptest"
	"testing"

	"github.com/keygate/keygate/auth"
)

func TestCountsAsFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		v    auth.Verdict
		want bool
	}{
		{"unknown key", auth.Refuse(auth.ReasonUnknown, ""), true},
		{"bad checksum", auth.Refuse(auth.ReasonChecksum, ""), true},
		{"malformed", auth.Refuse(auth.ReasonMalformed, ""), true},
		{"revoked", auth.Refuse(auth.ReasonRevoked, ""), true},
		{"expired", auth.Refuse(auth.ReasonExpired, ""), true},
		{"two keys", auth.Refuse(auth.ReasonDuplicate, ""), true},
		{"invalid token", auth.Verdict{Reason: auth.ReasonInvalid, Status: 401}, true},
		{"no credential", auth.Refuse(auth.ReasonMissing, ""), false},
		{"method switched off", auth.Refuse(auth.ReasonDisabled, ""), false},
		{"valid token without the scope", auth.Verdict{Reason: "insufficient_scope", Status: 403}, false},
	}
	for _, c := range cases {
		if got := countsAsFailure(c.v); got != c.want {
			t.Errorf("%s: countsAsFailure = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPeerAddr(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"192.0.2.1:1234":          "192.0.2.1",
		"[2001:db8::1]:443":       "2001:db8::1",
		"[::ffff:192.0.2.9]:8080": "192.0.2.9",
		"192.0.2.3":               "192.0.2.3",
		"@unix":                   "invalid IP",
		"":                        "invalid IP",
	}
	for remote, want := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if got := peerAddr(r); got.String() != want {
			t.Errorf("peerAddr(%q) = %s, want %s", remote, got, want)
		}
	}
}
