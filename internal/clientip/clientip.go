// Package clientip decides which address a request comes from: the TCP
// peer, or, behind proxies the operator trusts (server.trusted_proxies),
// the right-most X-Forwarded-For hop that is not one of them. The gateway
// and the portal both attribute requests with it (the access log, the
// X-Forwarded-For and X-Real-IP sent upstream, the failed-auth limit, the
// portal's rate limit and audit source).
package clientip

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/keygate/keygate/internal/inputcheck"
)

// TrustedProxies is the set of peers whose X-Forwarded-For keygate
// believes (server.trusted_proxies). The zero value trusts nobody: the
// client address is then always the TCP peer.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// ParseTrustedProxies parses CIDRs ("10.0.0.0/8") and bare addresses
// ("192.0.2.7", taken as one host). A CIDR with host bits set
// ("10.1.2.3/8") is refused, naming its canonical form, as on every way
// in (package inputcheck): trusting a whole range where one proxy was
// meant would let any host in it name the client. field names the option
// in errors.
func ParseTrustedProxies(field string, cidrs []string) (TrustedProxies, error) {
	var tp TrustedProxies
	for i, c := range cidrs {
		if err := inputcheck.CIDR(fmt.Sprintf("%s[%d]", field, i), c); err != nil {
			return TrustedProxies{}, err
		}
		c = strings.TrimSpace(c)
		p, err := netip.ParsePrefix(c)
		if err != nil {
			a, aerr := netip.ParseAddr(c)
			if aerr != nil {
				return TrustedProxies{}, fmt.Errorf("%s[%d]: %q is neither a CIDR nor an IP address", field, i, cidrs[i])
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		tp.prefixes = append(tp.prefixes, p.Masked())
	}
	return tp, nil
}

// Empty reports whether no proxy is trusted.
func (tp TrustedProxies) Empty() bool { return len(tp.prefixes) == 0 }

// Contains reports whether a is a trusted proxy.
func (tp TrustedProxies) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range tp.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// PeerAddr is the TCP peer of r; the zero Addr when RemoteAddr holds none.
func PeerAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a.Unmap()
}

// ClientAddr is the address a request is attributed to: the TCP peer,
// or, when the peer is a trusted proxy, the right-most address in
// X-Forwarded-For that is not itself a trusted proxy. An entry that does
// not parse ends the walk, and the hop to its right is the client: nothing
// left of a garbled entry can be believed. It feeds the access log, the
// X-Forwarded-For and X-Real-IP sent upstream, and the failed-auth limit.
func (tp TrustedProxies) ClientAddr(r *http.Request) netip.Addr {
	client := PeerAddr(r)
	if len(tp.prefixes) == 0 || !tp.Contains(client) {
		return client
	}
	xff := r.Header["X-Forwarded-For"]
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			var hop string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = v[j+1:], v[:j]
			} else {
				hop, v = v, ""
			}
			hop = strings.TrimSpace(hop)
			a, err := netip.ParseAddr(hop)
			if err != nil {
				return client
			}
			client = a.Unmap()
			if !tp.Contains(client) {
				return client
			}
		}
	}
	return client
}
