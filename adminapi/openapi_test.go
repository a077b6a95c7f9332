package adminapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/keygate/keygate/adminapi"
)

type obj = map[string]any

func loadDoc(t *testing.T) obj {
	t.Helper()
	var doc obj
	if err := json.Unmarshal(adminapi.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

// resolve follows a local $ref.
func resolve(t *testing.T, doc obj, v any) obj {
	t.Helper()
	m, _ := v.(obj)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			c, _ := cur.(obj)
			cur = c[part]
		}
		if cur == nil {
			t.Fatalf("unresolved $ref %s", ref)
		}
		m, _ = cur.(obj)
	}
	return m
}

// operations lists the document's operations as "METHOD path".
func operations(doc obj) map[string]obj {
	ops := map[string]obj{}
	for p, item := range doc["paths"].(obj) {
		for m, op := range item.(obj) {
			ops[strings.ToUpper(m)+" "+p] = op.(obj)
		}
	}
	return ops
}

func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v, want 3.1.0", doc["openapi"])
	}
	// Every $ref resolves.
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case obj:
			if _, ok := x["$ref"]; ok {
				resolve(t, doc, x)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	// Examples fit their schemas.
	for name, op := range operations(doc) {
		for status, r := range op["responses"].(obj) {
			for ct, c := range mapOf(resolve(t, doc, r)["content"]) {
				c := c.(obj)
				for ex, e := range mapOf(c["examples"]) {
					if err := validate(t, doc, c["schema"], e.(obj)["value"], "$"); err != nil {
						t.Errorf("%s %s %s example %s: %v", name, status, ct, ex, err)
					}
				}
			}
		}
		if rb, ok := op["requestBody"].(obj); ok {
			c := rb["content"].(obj)["application/json"].(obj)
			for ex, e := range mapOf(c["examples"]) {
				if err := validate(t, doc, c["schema"], e.(obj)["value"], "$"); err != nil {
					t.Errorf("%s request example %s: %v", name, ex, err)
				}
			}
		}
	}
}

func mapOf(v any) obj {
	m, _ := v.(obj)
	return m
}

// TestOpenAPICoversRoutes walks the routes the API registers: each is
// in the document with its scope, and the document has no other.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	ops := operations(doc)
	f := newFixture(t, nil)
	seen := map[string]bool{}
	for _, rt := range f.api.Routes() {
		name := rt.Method + " " + rt.Pattern
		seen[name] = true
		op, ok := ops[name]
		if !ok {
			t.Errorf("route %s is not in openapi.json", name)
			continue
		}
		for _, sec := range op["security"].([]any) {
			for scheme, scopes := range sec.(obj) {
				got := fmt.Sprint(scopes)
				want := "[]"
				if rt.Scope != "" {
					want = "[" + rt.Scope + "]"
				}
				if got != want {
					t.Errorf("%s: security %s scopes %s, the route needs %s", name, scheme, got, want)
				}
			}
		}
		// The route is really registered: an unauthenticated call gets
		// the API's 401, not the mux's 404 or 405.
		path := strings.NewReplacer("{id}", "x").Replace(rt.Pattern)
		if r := f.do(t, "", rt.Method, path, ""); r.status != http.StatusUnauthorized {
			t.Errorf("%s %s without a credential: %d, want 401", rt.Method, path, r.status)
		}
	}
	for name := range ops {
		if !seen[name] {
			t.Errorf("openapi.json documents %s, which the API does not serve", name)
		}
	}
}

// TestOpenAPIExamplesRoundTrip sends every example of the document to a
// fresh API over the fixture's records: a response example named N is
// the answer to the request example N (path and query parameters take
// their example N, else "default"). The answer must have the example's
// status, fit the response schema and have the example's shape. The
// shared 401 and 403 examples are sent without a credential and with a
// credential that has no scope.
func TestOpenAPIExamplesRoundTrip(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	ran := 0
	for name, op := range operations(doc) {
		method, path, _ := strings.Cut(name, " ")
		var reqExamples obj
		if rb, ok := op["requestBody"].(obj); ok {
			reqExamples = mapOf(rb["content"].(obj)["application/json"].(obj)["examples"])
		}
		for status, r := range op["responses"].(obj) {
			resp := resolve(t, doc, r)
			for ct, c := range mapOf(resp["content"]) {
				c := c.(obj)
				for ex, e := range mapOf(c["examples"]) {
					t.Run(name+" "+status+" "+ex, func(t *testing.T) {
						ran++
						f := newFixture(t, nil)
						body := ""
						if re, ok := reqExamples[ex].(obj); ok {
							b, _ := json.Marshal(re["value"])
							body = string(b)
						} else if len(reqExamples) > 0 && ex != "no_credential" && ex != "missing_scope" {
							t.Fatalf("response example %s has no request example of the same name", ex)
						} else if len(reqExamples) > 0 {
							for _, re := range reqExamples { // any valid body
								b, _ := json.Marshal(re.(obj)["value"])
								body = string(b)
								break
							}
						}
						target, query := path, url.Values{}
						for _, p := range listOf(op["parameters"]) {
							p := resolve(t, doc, p)
							exs := mapOf(p["examples"])
							v, ok := exs[ex].(obj)
							if !ok {
								v, ok = exs["default"].(obj)
							}
							if !ok {
								continue
							}
							switch p["in"] {
							case "path":
								target = strings.ReplaceAll(target, "{"+p["name"].(string)+"}", fmt.Sprint(v["value"]))
							case "query":
								query.Set(p["name"].(string), fmt.Sprint(v["value"]))
							}
						}
						if len(query) > 0 {
							target += "?" + query.Encode()
						}
						token := allToken
						switch ex {
						case "no_credential":
							token = ""
						case "missing_scope":
							token = "kga_none"
						}
						got := f.do(t, token, method, target, body)
						if fmt.Sprint(got.status) != status {
							t.Fatalf("%s %s: status %d, want %s; body %s", method, target, got.status, status, got.body)
						}
						if gct := got.header.Get("Content-Type"); gct != ct {
							t.Errorf("Content-Type %q, want %q", gct, ct)
						}
						var v any
						if err := json.Unmarshal(got.body, &v); err != nil {
							t.Fatalf("body: %v: %s", err, got.body)
						}
						if err := validate(t, doc, c["schema"], v, "$"); err != nil {
							t.Errorf("response does not fit the schema: %v\n%s", err, got.body)
						}
						if err := sameShape(e.(obj)["value"], v, "$"); err != nil {
							t.Errorf("response does not have the example's shape: %v\n%s", err, got.body)
						}
					})
				}
			}
		}
	}
	if ran < 15 {
		t.Errorf("only %d examples ran", ran)
	}
}

// sameShape checks that got has exactly want's members, recursively,
// with the same JSON types; values may differ (ids, times, keys).
func sameShape(want, got any, at string) error {
	switch w := want.(type) {
	case obj:
		g, ok := got.(obj)
		if !ok {
			return fmt.Errorf("%s: got %T, want an object", at, got)
		}
		if wk, gk := keys(w), keys(g); !slices.Equal(wk, gk) {
			return fmt.Errorf("%s: members %v, want %v", at, gk, wk)
		}
		for k := range w {
			if err := sameShape(w[k], g[k], at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: got %T, want an array", at, got)
		}
		if len(w) > 0 && len(g) > 0 {
			return sameShape(w[0], g[0], at+"[0]")
		}
	default:
		if reflect.TypeOf(want) != reflect.TypeOf(got) {
			return fmt.Errorf("%s: got %T, want %T", at, got, want)
		}
	}
	return nil
}

func keys(m obj) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validate checks v against the subset of JSON Schema 2020-12 the
// document uses: $ref, allOf, oneOf, type (also a list), const, enum,
// properties, required, additionalProperties, items, pattern, minimum,
// maximum, minProperties.
func validate(t *testing.T, doc obj, schema any, v any, at string) error {
	s := resolve(t, doc, schema)
	if s == nil {
		return nil
	}
	for _, sub := range listOf(s["allOf"]) {
		if err := validate(t, doc, sub, v, at); err != nil {
			return err
		}
	}
	if one := listOf(s["oneOf"]); len(one) > 0 {
		n := 0
		for _, sub := range one {
			if validate(t, doc, sub, v, at) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: fits %d of oneOf's %d schemas, want exactly 1", at, n, len(one))
		}
	}
	if typ, ok := s["type"]; ok {
		types := []string{}
		switch x := typ.(type) {
		case string:
			types = append(types, x)
		case []any:
			for _, e := range x {
				types = append(types, e.(string))
			}
		}
		if !slices.Contains(types, jsonType(v)) && !(jsonType(v) == "integer" && slices.Contains(types, "number")) {
			return fmt.Errorf("%s: a %s, want %v", at, jsonType(v), types)
		}
	}
	if c, ok := s["const"]; ok && !reflect.DeepEqual(c, v) {
		return fmt.Errorf("%s: %v, want %v", at, v, c)
	}
	if e := listOf(s["enum"]); len(e) > 0 && !slices.ContainsFunc(e, func(x any) bool { return reflect.DeepEqual(x, v) }) {
		return fmt.Errorf("%s: %v is not one of %v", at, v, e)
	}
	switch x := v.(type) {
	case obj:
		props := mapOf(s["properties"])
		for _, r := range listOf(s["required"]) {
			if _, ok := x[r.(string)]; !ok {
				return fmt.Errorf("%s: %s is required", at, r)
			}
		}
		if n, ok := s["minProperties"].(float64); ok && len(x) < int(n) {
			return fmt.Errorf("%s: want at least %g members", at, n)
		}
		for k, e := range x {
			if p, ok := props[k]; ok {
				if err := validate(t, doc, p, e, at+"."+k); err != nil {
					return err
				}
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: member %s is not allowed", at, k)
				}
			case obj:
				if err := validate(t, doc, ap, e, at+"."+k); err != nil {
					return err
				}
			}
		}
	case []any:
		for i, e := range x {
			if err := validate(t, doc, s["items"], e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case string:
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x) {
			return fmt.Errorf("%s: %q does not match %s", at, x, p)
		}
	case float64:
		if m, ok := s["minimum"].(float64); ok && x < m {
			return fmt.Errorf("%s: %g is below %g", at, x, m)
		}
		if m, ok := s["maximum"].(float64); ok && x > m {
			return fmt.Errorf("%s: %g is above %g", at, x, m)
		}
	}
	return nil
}

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case obj:
		return "object"
	}
	return "unknown"
}
