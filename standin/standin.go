// Package standin is a stand-in for the extraction and schema-registry
// backends. It answers every request with JSON describing what it received:
// the method, path and query, the body's size and SHA-256, the multipart
// form's context field when there is one, and the identity headers the
// gateway sent. `make run` starts two of them so the gateway has something
// real to proxy to, and the tests use them to check what reached upstream.
package standin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
)

// Echo is what a stand-in answers. Tests decode it to see what the gateway
// forwarded.
type Echo struct {
	Backend    string              `json:"backend"`
	Method     string              `json:"method"`
	Path       string              `json:"path"`
	RawQuery   string              `json:"query,omitempty"`
	Bytes      int64               `json:"bytes"`
	SHA256     string              `json:"sha256"`
	Identity   map[string]string   `json:"identity"`
	SawAPIKey  bool                `json:"saw_api_key"`
	SawAuthz   bool                `json:"saw_authorization"`
	Forwarded  map[string]string   `json:"forwarded"`
	Headers    map[string][]string `json:"headers"`
	BodyError  string              `json:"body_error,omitempty"`
	HeaderKeys []string            `json:"header_keys"`
}

// Handler answers every request with an Echo. Name is reported as the
// backend's name. The zero value is ready to use and safe for concurrent use.
type Handler struct {
	Name string
}

// ServeHTTP reads the whole body, hashing it as it goes, and answers 200
// with the Echo as JSON.
func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sum := sha256.New()
	n, err := io.Copy(sum, r.Body)
	e := Echo{
		Backend:   h.Name,
		Method:    r.Method,
		Path:      r.URL.EscapedPath(),
		RawQuery:  r.URL.RawQuery,
		Bytes:     n,
		SHA256:    hex.EncodeToString(sum.Sum(nil)),
		Identity:  map[string]string{},
		Forwarded: map[string]string{},
		Headers:   map[string][]string{},
	}
	if err != nil {
		e.BodyError = err.Error()
	}
	for k, v := range r.Header {
		lk := strings.ToLower(k)
		e.HeaderKeys = append(e.HeaderKeys, lk)
		switch {
		case lk == "x-api-key":
			e.SawAPIKey = true
		case lk == "authorization":
			e.SawAuthz = true
		case strings.HasPrefix(lk, "x-keygate-"):
			e.Identity[lk] = strings.Join(v, ",")
		case strings.HasPrefix(lk, "x-forwarded-") || lk == "forwarded" || lk == "traceparent":
			e.Forwarded[lk] = strings.Join(v, ",")
		default:
			e.Headers[lk] = v
		}
	}
	sort.Strings(e.HeaderKeys)
	w.Header().Set("Content-Type", "application/json")
	status := http.StatusOK
	if err != nil {
		status = http.StatusBadRequest
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(e)
}
