package adminapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
	"github.com/keygate/keygate/keystore"
)

// Problem is an RFC 9457 problem details object, the body of every error.
type Problem struct {
	// Type identifies the kind of problem: "urn:keygate:problem:" and a
	// slug such as unauthorized or invalid-request.
	Type string `json:"type"`
	// Title is the same for every problem of a Type.
	Title string `json:"title"`
	// Status is the HTTP status.
	Status int `json:"status"`
	// Detail explains this occurrence; it never holds a credential.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
}

// ProblemTypePrefix starts every Problem.Type.
const ProblemTypePrefix = "urn:keygate:problem:"

func writeProblem(w http.ResponseWriter, r *http.Request, status int, slug, title, detail string) {
	p := Problem{Type: ProblemTypePrefix + slug, Title: title, Status: status, Detail: detail, Instance: r.URL.Path}
	b, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// apiError is an error with its problem type.
type apiError struct {
	status int
	slug   string
	title  string
	detail string
	// retryAfter, when set, is sent as Retry-After (seconds).
	retryAfter string
}

// unavailableRetryAfter is the Retry-After of a 503 for a key store that
// cannot answer: a Redis failover completes within seconds.
const unavailableRetryAfter = "2"

func (e *apiError) Error() string { return e.detail }

func badRequest(detail string) error {
	return &apiError{status: http.StatusBadRequest, slug: "invalid-request", title: "the request is invalid", detail: detail}
}

// problemOf maps an error to its problem: the one place that does.
func (a *API) problemOf(r *http.Request, err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, keyops.ErrInvalid):
		return &apiError{status: http.StatusBadRequest, slug: "invalid-request", title: "the request is invalid", detail: err.Error()}
	case errors.Is(err, keystore.ErrNotFound), errors.Is(err, keystore.ErrConsumerNotFound):
		return &apiError{status: http.StatusNotFound, slug: "not-found", title: "no such resource", detail: err.Error()}
	case errors.Is(err, keystore.ErrConsumerInUse), errors.Is(err, keystore.ErrRevoked),
		errors.Is(err, keystore.ErrRotated), errors.Is(err, keystore.ErrExpired):
		return &apiError{status: http.StatusConflict, slug: "conflict", title: "the resource's state does not allow this", detail: err.Error()}
	case errors.Is(err, keystore.ErrNotDurable):
		// An issue's key is withdrawn; any other change stands on the
		// primary and on every replica that saw it, and repeating it is
		// safe.
		return &apiError{status: http.StatusServiceUnavailable, slug: "not-durable", title: "Redis replicas did not confirm the change in time", detail: err.Error(), retryAfter: unavailableRetryAfter}
	case keystore.Unavailable(err):
		// Redis, or the part of a Cluster that holds this record, cannot
		// answer now (a node is down or a failover is under way): the
		// caller should retry, not report a fault.
		a.log.Warn("admin api request: key store unavailable", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
		return &apiError{status: http.StatusServiceUnavailable, slug: "unavailable", title: "the key store is unavailable",
			detail: "the key store cannot be reached now (Redis is down or failing over); retry shortly", retryAfter: unavailableRetryAfter}
	}
	a.log.Error("admin api request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	return &apiError{status: http.StatusInternalServerError, slug: "internal", title: "internal error", detail: "the request failed; the gateway's log has the cause"}
}
