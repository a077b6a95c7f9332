package gateway

import (
	"net/http"
	"time"
)

// setLeakWarning marks a response to a quarantined key (found in public,
// working until its expiry): a Warning (299, RFC 9111 §5.5) a person
// reading a log understands, and a Sunset (RFC 8594) that a client
// library can act on. The key's own sunset replaces the API keys' general
// one: it comes sooner.
func setLeakWarning(h http.Header, until time.Time) {
	at := until.UTC().Format(http.TimeFormat)
	h.Set("Warning", `299 keygate "this API key was found in public and stops working at `+at+`; rotate it"`)
	h.Set("Sunset", at)
}
