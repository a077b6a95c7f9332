package gateway

import (
	"net/http"
	"net/netip"

	"github.com/keygate/keygate/internal/clientip"
)

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
