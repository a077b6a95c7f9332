package gateway

import (
	"mime"
	"net/http"
	"strings"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/policy"
)

// overrideHeaders are the headers by which frameworks let a request say
// that it is another method (Rails, Laravel, Symfony, Express's
// method-override, ASP.NET) or another path (X-Original-URL and
// X-Rewrite-URL: IIS, Zend/Laminas, older Symfony), in canonical form.
// net/http canonicalises every header name it reads; names with "_" are
// dropped before forwarding (scrubOutbound).
var overrideHeaders = [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Url", "X-Rewrite-Url"}

// checkOverride refuses a request that carries a method or URL override:
// one of overrideHeaders (with any value, in any letter case), or a query
// parameter an upstream reads as _method. The spec defines none of them,
// and keygate checks the method and path that it forwards; an upstream
// that honoured an override would act on something unchecked.
func checkOverride(r *http.Request) refusal {
	for _, k := range overrideHeaders {
		if _, ok := r.Header[k]; ok {
			return refusal{kind: refOverride}
		}
	}
	if r.URL.RawQuery != "" && queryOverridesMethod(r.URL.RawQuery) {
		return refusal{kind: refOverride}
	}
	return refusal{}
}

// queryOverridesMethod reports whether a query string has a parameter an
// upstream could read as _method: its name decoded (escapes and "+"),
// without the leading spaces PHP drops, cut at "[" (PHP's, Rack's and qs's
// arrays), is "_method" in any letter case, or ".method" (PHP turns a dot in a
// name into "_"). Pairs are split on "&" and ";" (older
// Rack splits on both). A query with no "%" and no "method" in any case
// is passed over without a look at its pairs.
func queryOverridesMethod(q string) bool {
	if strings.IndexByte(q, '%') < 0 && !containsFoldASCII(q, "method") {
		return false
	}
	for q != "" {
		var kv string
		if i := strings.IndexAny(q, "&;"); i >= 0 {
			kv, q = q[:i], q[i+1:]
		} else {
			kv, q = q, ""
		}
		name, _, _ := strings.Cut(kv, "=")
		if methodParam(name) {
			return true
		}
	}
	return false
}

// methodParam reports whether an escaped query parameter name reads as
// _method (see queryOverridesMethod).
func methodParam(name string) bool {
	n := strings.TrimLeft(lenientUnescape(name), " ")
	if i := strings.IndexByte(n, '['); i >= 0 {
		n = n[:i]
	}
	return len(n) == len("_method") && (n[0] == '_' || n[0] == '.') && strings.EqualFold(n[1:], "method")
}

// lenientUnescape decodes a query component the way lenient parsers do:
// "+" is a space, "%" and two hex digits a byte, any other "%" itself.
func lenientUnescape(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s):
			if x, ok := unhex2(s[i+1], s[i+2]); ok {
				b = append(b, x)
				i += 2
				continue
			}
			b = append(b, c)
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// containsFoldASCII reports whether s contains sub (lower-case ASCII) in
// any ASCII letter case.
func containsFoldASCII(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for ; j < len(sub); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				break
			}
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

// overridableMethods are the methods a form body's _method can turn a
// POST into (Rack::MethodOverride's list, less POST and the rare ones no
// operation names).
var overridableMethods = [...]string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// formOverride refuses a form-bodied POST below /registry whose key may
// not make every request the form's _method field could turn it into.
// Rails, Laravel and Symfony read _method from an
// application/x-www-form-urlencoded or multipart/form-data body; keygate
// streams /registry bodies and does not read them, so it does not know
// whether one holds _method. A key that may use every method on the path
// loses nothing to an override and is let through; any other sends the
// real method, or a body of another type.
func (g *Gateway) formOverride(r *http.Request, st *state, p *auth.Principal) refusal {
	if r.Method != http.MethodPost || p.Access == nil {
		return refusal{}
	}
	ct := r.Header["Content-Type"]
	if len(ct) == 0 {
		return refusal{}
	}
	if len(ct) == 1 && !formType(ct[0]) {
		return refusal{}
	}
	for _, m := range overridableMethods {
		if p.Access.Decide(g.ops.Match(m, st.path), st.client) != policy.DenyNone {
			return refusal{kind: refOverride, message: msgFormOverride}
		}
	}
	return refusal{}
}

// formType reports whether a Content-Type could be read as a form:
// application/x-www-form-urlencoded or multipart/form-data, or one that
// does not parse (an upstream may read it more leniently).
func formType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err != nil || mt == "application/x-www-form-urlencoded" || strings.HasPrefix(mt, "multipart/")
}

const (
	msgOverride     = "Bad Request: method and URL overrides (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, X-Original-URL, X-Rewrite-URL, _method) are not accepted; send the request with its real method and path"
	msgFormOverride = "Bad Request: a form body's _method could override this POST, and this credential may not use every method on this path; send the real method, or a body that is not a form"
	msgPath         = "Bad Request: the request path could be read in more than one way (an encoded '/', '.', '%', ';', '?', '#' or backslash, a control character, a bad escape, an empty segment or one ending in a dot or space, or characters that read as ASCII); send it in its plain form"
)
