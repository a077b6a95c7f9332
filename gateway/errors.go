package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// errorBody is the spec's error shape (section 2.2).
type errorBody struct {
	StateText string   `json:"StateText"`
	TraceID   string   `json:"TraceId"`
	Messages  []string `json:"Messages"`
}

// StatusClientClosedRequest is logged (never sent) when the client went away
// before the answer, as nginx and Caddy do.
const StatusClientClosedRequest = 499

// WriteError writes the spec's JSON error body with status. Every error the
// gateway itself produces leaves through here, so every one has the same
// shape, Content-Type and trace id.
func WriteError(w http.ResponseWriter, traceID string, status int, messages ...string) {
	if messages == nil {
		messages = []string{http.StatusText(status)}
	}
	b, err := json.Marshal(errorBody{StateText: "ERROR", TraceID: traceID, Messages: messages})
	if err != nil { // cannot happen with strings; keep the shape anyway
		b = []byte(`{"StateText":"ERROR","TraceId":"` + traceID + `","Messages":["internal error"]}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Trace-Id", traceID)
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// upstreamRefusal maps an error from the upstream round trip to the
// refusal the client gets, as Caddy's reverse proxy does: 504 for a
// timeout, 499 when the client went away, 502 otherwise.
func upstreamRefusal(ctx context.Context, err error) refusal {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return refusal{kind: refTooLarge}
	case ctx.Err() == context.Canceled || errors.Is(err, context.Canceled):
		return refusal{kind: refUpstreamClientGone, detail: err.Error()}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return refusal{kind: refUpstream, status: http.StatusGatewayTimeout, message: "upstream timed out", detail: err.Error()}
	default:
		return refusal{kind: refUpstream, detail: err.Error()}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// WriteOAuthError writes an RFC 6749 §5.2 error response: a JSON object
// with error (code) and error_description (desc, reduced to the
// characters §5.2 allows), the trace id in X-Trace-Id. The token
// endpoint's refusals leave through it, on either listener.
func WriteOAuthError(w http.ResponseWriter, traceID string, status int, code, desc string) {
	b, _ := json.Marshal(struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}{code, OAuthDescription(desc)})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("X-Trace-Id", traceID)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// OAuthDescription reduces s to the characters RFC 6749 §5.2 allows in
// error_description (printable ASCII but '"' and '\'): a quote becomes
// an apostrophe, anything else '?'.
func OAuthDescription(s string) string {
	return strings.Map(func(c rune) rune {
		switch {
		case c == '"':
			return '\''
		case c == '\\' || c < 0x20 || c > 0x7e:
			return '?'
		}
		return c
	}, s)
}
