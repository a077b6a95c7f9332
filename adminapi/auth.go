package adminapi

import (
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
)

// TokenPrefix starts every admin token.
const TokenPrefix = "kga_"

// authenticate returns the caller, or writes the 401/503 problem and
// returns ok=false. A bearer token, when sent, is the credential even if
// a client certificate is sent too.
func (a *API) authenticate(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	if h := r.Header.Values("Authorization"); len(h) > 0 {
		scheme, token, found := strings.Cut(h[0], " ")
		if len(h) != 1 || !found || !strings.EqualFold(scheme, "Bearer") || !strings.HasPrefix(token, TokenPrefix) || a.deps.Tokens == nil {
			unauthorized(w, r, "the Authorization header must be \"Bearer kga_...\" with a valid admin token")
			return Principal{}, false
		}
		p, ok, err := a.deps.Tokens.Authenticate(r.Context(), token)
		if err != nil {
			a.log.Error("admin token check failed", zap.Error(err))
			w.Header().Set("Retry-After", unavailableRetryAfter)
			writeProblem(w, r, http.StatusServiceUnavailable, "unavailable", "the credential store is unavailable", "admin tokens cannot be checked now; retry shortly")
			return Principal{}, false
		}
		if !ok || p.ID == "" {
			unauthorized(w, r, "the admin token is unknown, revoked or expired")
			return Principal{}, false
		}
		return p, true
	}
	if a.clientCA != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cert := r.TLS.VerifiedChains[0][0]
		if keyops.CheckText("subject", cert.Subject.String()) != nil {
			// It names the caller in the audit log, which must not
			// hold text that prints as something else.
			unauthorized(w, r, "the client certificate's subject holds control or formatting characters")
			return Principal{}, false
		}
		return Principal{ID: "cert:" + cert.Subject.String(), Scopes: a.cfg.ClientCertScopes[cert.Subject.CommonName]}, true
	}
	unauthorized(w, r, "send an admin token (Authorization: Bearer kga_...) or a client certificate")
	return Principal{}, false
}

func unauthorized(w http.ResponseWriter, r *http.Request, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="keygate-admin"`)
	writeProblem(w, r, http.StatusUnauthorized, "unauthorized", "authentication required", detail)
}
