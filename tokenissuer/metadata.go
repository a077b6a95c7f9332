package tokenissuer

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// metadata is the RFC 8414 document.
func (i *Issuer) metadata() []byte {
	scopes := make([]string, 0, len(i.scopes))
	for _, ps := range i.scopes {
		scopes = append(scopes, ps.scope)
	}
	b, _ := json.Marshal(map[string]any{
		"issuer":                                i.cfg.Issuer,
		"token_endpoint":                        i.cfg.endpoint(TokenPath),
		"jwks_uri":                              i.cfg.endpoint(JWKSPath),
		"grant_types_supported":                 []string{"client_credentials"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
		"scopes_supported":                      scopes,
		"response_types_supported":              []string{},
	})
	return b
}

// MetadataHandler answers GET /.well-known/oauth-authorization-server.
func (i *Issuer) MetadataHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, i.meta, "public, max-age=3600")
	})
}

// JWKSHandler answers GET /.well-known/jwks.json: the public keys only,
// cached for far less than the time a retired key stays published.
func (i *Issuer) JWKSHandler() http.Handler {
	cc := "public, max-age=" + strconv.Itoa(int(min(jwksMaxAge, i.cfg.TTL/2).Seconds()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, i.keys.Load().jwks, cc)
	})
}

func writeJSON(w http.ResponseWriter, r *http.Request, b []byte, cacheControl string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", cacheControl)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
