package gateway

import (
	"net/http"
	"net/netip"

	"github.com/keygate/keygate/internal/clientip"
)

// ClientAddr is the address the gateway attributed r to, once r is inside
// the gateway's request path (for example in a handler wrapped around the
// proxy); outside it, the TCP peer. Config.TrustedProxies decides it (see
// package clientip).
func ClientAddr(r *http.Request) netip.Addr {
	if st, ok := r.Context().Value(stateKey{}).(*state); ok {
		return st.client
	}
	return peerAddr(r)
}

// peerAddr is the TCP peer of r; the zero Addr when RemoteAddr holds none.
func peerAddr(r *http.Request) netip.Addr { return clientip.PeerAddr(r) }

// remoteString is the client address for the access log; the raw
// RemoteAddr when it held no IP.
func remoteString(r *http.Request, client netip.Addr) string {
	if !client.IsValid() {
		return r.RemoteAddr
	}
	return client.String()
}

// remote is remoteString for st's request.
func (st *state) remote(r *http.Request) string { return remoteString(r, st.client) }
