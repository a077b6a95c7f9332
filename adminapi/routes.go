package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/inputcheck"
	"github.com/keygate/keygate/internal/statuswriter"
	"github.com/keygate/keygate/internal/strictjson"

	"go.uber.org/zap"

	"github.com/keygate/keygate/keyops"
)

// Route is one operation the API serves.
type Route struct {
	Method string
	// Pattern is the path as http.ServeMux and the OpenAPI document write
	// it, such as /v1/keys/{id}.
	Pattern string
	// Scope is the scope the caller needs; "" means any authenticated
	// caller.
	Scope  string
	handle func(r *request) (response, error)
}

// request is a call as a handler sees it.
type request struct {
	*http.Request
	principal Principal
	body      []byte
}

// actor is who the audit log records for the call.
func (r *request) actor() keyops.Actor {
	return keyops.Actor{ID: r.principal.ID, Addr: r.RemoteAddr}
}

// response is a handler's answer. replay, when not nil, is the body kept
// for a retry with the same Idempotency-Key instead of body (one without
// the secret body carries).
type response struct {
	status   int
	body     any
	replay   any
	location string
	raw      []byte // written as is, with contentType
	ctype    string
}

// maxBody caps request bodies.
const maxBody = 64 << 10

// Routes lists every operation, in the order the document gives them.
func (a *API) Routes() []Route { return a.routes() }

func (a *API) routes() []Route {
	return []Route{
		{"GET", "/v1/openapi.json", "", a.openAPI},
		{"GET", "/v1/consumers", ScopeConsumersRead, a.listConsumers},
		{"POST", "/v1/consumers", ScopeConsumersWrite, a.createConsumer},
		{"GET", "/v1/consumers/{id}", ScopeConsumersRead, a.getConsumer},
		{"PATCH", "/v1/consumers/{id}", ScopeConsumersWrite, a.updateConsumer},
		{"DELETE", "/v1/consumers/{id}", ScopeConsumersWrite, a.deleteConsumer},
		{"GET", "/v1/keys", ScopeKeysRead, a.listKeys},
		{"POST", "/v1/keys", ScopeKeysWrite, a.issueKey},
		{"GET", "/v1/keys/{id}", ScopeKeysRead, a.getKey},
		{"PATCH", "/v1/keys/{id}", ScopeKeysWrite, a.updateKey},
		{"POST", "/v1/keys/{id}/rotate", ScopeKeysWrite, a.rotateKey},
		{"POST", "/v1/keys/{id}/revoke", ScopeKeysWrite, a.revokeKey},
		{"POST", "/v1/keys/purge", ScopeKeysWrite, a.purgeKeys},
		{"GET", "/v1/keys/{id}/usage", ScopeUsageRead, a.keyUsage},
		{"GET", "/v1/migration", ScopeUsageRead, a.migration},
		{"GET", "/v1/audit-events", ScopeAuditRead, a.auditEvents},
		{"POST", "/v1/portal-sessions", ScopeKeysWrite, a.createPortalSession},
	}
}

func isWrite(method string) bool { return method != http.MethodGet && method != http.MethodHead }

// wrap authenticates, checks the scope, reads the body, applies the
// Idempotency-Key and writes the handler's response.
func (a *API) wrap(rt Route) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := a.now()
		w := statuswriter.Wrap(rw)
		var actor string
		defer func() {
			// One line per call: no query (cursors), no header, no body.
			if ce := a.log.Check(zap.InfoLevel, "admin api"); ce != nil {
				ce.Write(zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Int("status", w.Status()),
					zap.String("actor", actor), zap.String("remote", r.RemoteAddr), zap.Float64("duration_ms", float64(a.now().Sub(start))/float64(time.Millisecond)))
			}
		}()
		p, ok := a.authenticate(w, r)
		if !ok {
			return
		}
		actor = p.ID
		if rt.Scope != "" && !p.Has(rt.Scope) {
			writeProblem(w, r, http.StatusForbidden, "forbidden", "missing scope", "this operation needs the scope "+rt.Scope)
			return
		}
		// One value per query parameter, and a query that parses: what a
		// handler reads is what every other parser of the URL reads.
		if _, err := inputcheck.Query(r.URL.RawQuery); err != nil {
			writeProblem(w, r, http.StatusBadRequest, "invalid-request", "the request is invalid", err.Error())
			return
		}
		req := &request{Request: r, principal: p}
		if isWrite(r.Method) {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				writeProblem(w, r, http.StatusRequestEntityTooLarge, "too-large", "request body too large", "the body must be at most 64 KiB")
				return
			case err != nil:
				writeProblem(w, r, http.StatusBadRequest, "invalid-request", "the request is invalid", "the body could not be read")
				return
			}
			if len(bytes.TrimSpace(body)) > 0 {
				ct := r.Header.Get("Content-Type")
				if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
					writeProblem(w, r, http.StatusUnsupportedMediaType, "unsupported-media-type", "unsupported media type", "Content-Type: send the body as application/json")
					return
				}
				// The body is read as UTF-8 whatever it declares, so a body
				// declared as another charset is refused, not misread.
				if err := inputcheck.Charset(ct); err != nil {
					writeProblem(w, r, http.StatusUnsupportedMediaType, "unsupported-media-type", "unsupported media type", err.Error())
					return
				}
			}
			req.body = body
		}
		key := r.Header.Get("Idempotency-Key")
		if key == "" || !isWrite(r.Method) {
			a.serve(w, req, rt, false)
			return
		}
		if len(key) > 255 || strings.ContainsFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
			writeProblem(w, r, http.StatusBadRequest, "invalid-request", "the request is invalid", "Idempotency-Key must be 1 to 255 visible ASCII characters")
			return
		}
		ikey := p.ID + "\x00" + key
		fp := fingerprint(r, req.body)
		prev, conflict, mismatch, err := a.idem.begin(r.Context(), ikey, fp)
		switch {
		case err != nil:
			a.log.Error("admin api idempotency store failed", zap.Error(err))
			writeProblem(w, r, http.StatusServiceUnavailable, "unavailable", "the idempotency store is unavailable",
				"a request with an Idempotency-Key cannot be made safely now; retry shortly")
			return
		case mismatch:
			writeProblem(w, r, http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused",
				"this Idempotency-Key was used for a different request (method, path or body); use a new key")
			return
		case conflict:
			writeProblem(w, r, http.StatusConflict, "idempotency-in-progress", "request in progress",
				"a request with this Idempotency-Key is still being processed; retry later")
			return
		case prev != nil:
			h := w.Header()
			h.Set("Idempotent-Replayed", "true")
			if prev.location != "" {
				h.Set("Location", prev.location)
			}
			writeBody(w, prev.status, prev.body, contentTypeOf(prev.status))
			return
		}
		// The change is made whether or not the client waits: the record
		// of its response must not depend on the request's context.
		ctx := context.WithoutCancel(r.Context())
		finished := false
		defer func() {
			if !finished { // a panic: let the retry run again
				_ = a.idem.abandon(ctx, ikey)
			}
		}()
		status, stored, location := a.serve(w, req, rt, true)
		finished = true
		if status >= 500 {
			if err := a.idem.abandon(ctx, ikey); err != nil {
				a.log.Warn("admin api idempotency store failed", zap.Error(err))
			}
			return
		}
		if err := a.idem.finish(ctx, ikey, fp, status, stored, location); err != nil {
			a.log.Warn("admin api idempotency store failed: a retry of this request may be refused (409) until its claim expires", zap.Error(err))
		}
	})
}

func contentTypeOf(status int) string {
	if status >= 400 {
		return "application/problem+json"
	}
	return "application/json"
}

// serve runs the handler and writes its answer. It returns the status,
// the body to replay (made only when keep is set: a call with an
// Idempotency-Key) and the Location.
func (a *API) serve(w http.ResponseWriter, r *request, rt Route, keep bool) (int, []byte, string) {
	res, err := rt.handle(r)
	if err != nil {
		pe := a.problemOf(r.Request, err)
		p := Problem{Type: ProblemTypePrefix + pe.slug, Title: pe.title, Status: pe.status, Detail: pe.detail, Instance: r.URL.Path}
		b, _ := json.Marshal(p)
		b = append(b, '\n')
		if pe.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="keygate-admin"`)
		}
		if pe.retryAfter != "" {
			w.Header().Set("Retry-After", pe.retryAfter)
		}
		writeBody(w, pe.status, b, "application/problem+json")
		return pe.status, b, ""
	}
	if res.location != "" {
		w.Header().Set("Location", res.location)
	}
	if res.raw != nil {
		w.Header().Set("Content-Type", res.ctype)
		w.WriteHeader(res.status)
		_, _ = w.Write(res.raw)
		return res.status, res.raw, res.location
	}
	if res.status == http.StatusNoContent {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(res.status)
		return res.status, nil, res.location
	}
	b, err := json.Marshal(res.body)
	if err != nil {
		pe := a.problemOf(r.Request, err)
		writeProblem(w, r.Request, pe.status, pe.slug, pe.title, pe.detail)
		return pe.status, nil, ""
	}
	b = append(b, '\n')
	writeBody(w, res.status, b, "application/json")
	stored := b
	if res.replay != nil && keep {
		if stored, err = json.Marshal(res.replay); err != nil {
			return http.StatusInternalServerError, nil, ""
		}
		stored = append(stored, '\n')
	}
	return res.status, stored, res.location
}

func writeBody(w http.ResponseWriter, status int, b []byte, ctype string) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	h.Set("Content-Type", ctype)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// decode reads r's JSON body into v with package strictjson: unknown
// members, duplicate or case-variant names, invalid UTF-8 and trailing
// data are all a 400 that names the problem.
func (r *request) decode(v any) error {
	if len(bytes.TrimSpace(r.body)) == 0 {
		return badRequest("body: a JSON object is required")
	}
	if err := strictjson.UnmarshalObject(r.body, v); err != nil {
		return badRequest("body: " + err.Error())
	}
	return nil
}
