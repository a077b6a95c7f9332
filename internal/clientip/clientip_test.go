package clientip

import (
	"net/http/httptest"
	"testing"
)

// TestClientAddr: the client is the TCP peer unless the peer is a trusted
// proxy; then it is the right-most X-Forwarded-For hop that is not itself
// trusted, and a garbled hop ends the walk.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	tp, err := ParseTrustedProxies("server.trusted_proxies", []string{"10.0.0.0/8", "192.0.2.7", "::ffff:198.51.100.0/120"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer, XFF ignored", "203.0.113.5:1000", []string{"198.18.0.1"}, "203.0.113.5"},
		{"trusted peer, one hop", "10.1.2.3:1000", []string{"198.18.0.1"}, "198.18.0.1"},
		{"trusted peer, spoofed left part", "10.1.2.3:1000", []string{"1.1.1.1, 198.18.0.1"}, "198.18.0.1"},
		{"chain of trusted proxies", "10.1.2.3:1000", []string{"198.18.0.1, 10.9.9.9, 192.0.2.7"}, "198.18.0.1"},
		{"several header lines", "10.1.2.3:1000", []string{"1.1.1.1, 198.18.0.1", "10.0.0.9"}, "198.18.0.1"},
		{"all hops trusted", "10.1.2.3:1000", []string{"10.0.0.1, 10.0.0.2"}, "10.0.0.1"},
		{"garbled hop ends the walk", "10.1.2.3:1000", []string{"1.1.1.1, garbage, 10.0.0.2"}, "10.0.0.2"},
		{"garbled first hop", "10.1.2.3:1000", []string{"unknown"}, "10.1.2.3"},
		{"no XFF from a trusted peer", "10.1.2.3:1000", nil, "10.1.2.3"},
		{"mapped IPv4 prefix", "198.51.100.9:1000", []string{"198.18.0.1"}, "198.18.0.1"},
		{"IPv6 client", "10.1.2.3:1000", []string{"2001:db8::1"}, "2001:db8::1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			if c.xff != nil {
				r.Header["X-Forwarded-For"] = c.xff
			}
			if got := tp.ClientAddr(r).String(); got != c.want {
				t.Errorf("ClientAddr = %s, want %s", got, c.want)
			}
		})
	}
	var none TrustedProxies
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.1.2.3:1"
	r.Header.Set("X-Forwarded-For", "198.18.0.1")
	if got := none.ClientAddr(r).String(); got != "10.1.2.3" {
		t.Errorf("with no trusted proxies ClientAddr = %s, want the peer", got)
	}
	if _, err := ParseTrustedProxies("server.trusted_proxies", []string{"10.0.0.0/8", "nonsense"}); err == nil || err.Error() != `server.trusted_proxies[1]: "nonsense" is neither a CIDR nor an IP address` {
		t.Errorf("bad entry: %v", err)
	}
}
