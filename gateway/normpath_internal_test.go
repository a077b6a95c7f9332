package gateway

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/keygate/keygate/policy"
)

// TestNormalisePath: what is forwarded, what is matched, and what is
// refused, for the paths of issue 49 and their kin.
func TestNormalisePath(t *testing.T) {
	t.Parallel()
	const refused = "refused"
	for _, c := range []struct {
		in, fwd, dec string // fwd == refused: refused
	}{
		{"/registry", "/registry", "/registry"},
		{"/registry/", "/registry/", "/registry/"},
		{"/registry/admin/users", "/registry/admin/users", "/registry/admin/users"},
		{"/registry/ADMIN/users", "/registry/ADMIN/users", "/registry/ADMIN/users"},
		{"/registry/x.json", "/registry/x.json", "/registry/x.json"},
		{"/registry/a~b_c-d!$&'()*+,=:@", "/registry/a~b_c-d!$&'()*+,=:@", "/registry/a~b_c-d!$&'()*+,=:@"},
		{"/registry/%61dmin/users", "/registry/admin/users", "/registry/admin/users"},
		{"/registry/%61%64%6d%69%6e/users", "/registry/admin/users", "/registry/admin/users"},
		{"/registry/%61%64%6D%69%6E/users", "/registry/admin/users", "/registry/admin/users"},
		{"/registry/%41DMIN", "/registry/ADMIN", "/registry/ADMIN"},
		{"/registry/a%2d%5f%7e%30", "/registry/a-_~0", "/registry/a-_~0"},
		{"/%72egistry/x", refused, ""}, // never reaches here: no route; refused as well
		{"/registry/a%20b", "/registry/a%20b", "/registry/a b"},
		{"/registry/%c3%a9t%c3%a9", "/registry/%C3%A9t%C3%A9", "/registry/été"},
		{"/registry/a%21b", "/registry/a%21b", "/registry/a!b"},
		{"/registry/a%3ab", "/registry/a%3Ab", "/registry/a:b"},
		// Ambiguous encodings.
		{"/registry/a%2Fb", refused, ""},
		{"/registry/a%2fb", refused, ""},
		{"/registry/a%5cb", refused, ""},
		{"/registry/%2e%2e/sync", refused, ""},
		{"/registry/.%2e/sync", refused, ""},
		{"/registry/admin%2e/x", refused, ""},
		{"/registry/%2561dmin/users", refused, ""},
		{"/registry/%25", refused, ""},
		{"/registry/a%3bb", refused, ""},
		{"/registry/a%3fb", refused, ""},
		{"/registry/a%23b", refused, ""},
		{"/registry/a%00", refused, ""},
		{"/registry/a%0a", refused, ""},
		{"/registry/a%7f", refused, ""},
		{"/registry/a%zz", refused, ""},
		{"/registry/a%4", refused, ""},
		{"/registry/a%", refused, ""},
		{"/registry/%u0061dmin", refused, ""},
		{"/registry/%ff", refused, ""},           // not UTF-8
		{"/registry/%c1%a1", refused, ""},        // overlong "a"
		{"/registry/%e2%84%aa", refused, ""},     // Kelvin sign: folds to k
		{"/registry/%c5%bf", refused, ""},        // long s: upper case is S
		{"/registry/%c4%b1", refused, ""},        // dotless i: upper case is I
		{"/registry/%ef%bd%81dmin", refused, ""}, // fullwidth a: NFKC is a
		// Segments.
		{"/registry/admin./x", refused, ""},
		{"/registry/admin.", refused, ""},
		{"/registry/admin%20/x", refused, ""},
		{"/registry/admin...", refused, ""},
		{"/registry/./x", refused, ""},
		{"/registry/../sync", refused, ""},
		{"/registry//x", refused, ""},
		{"/registry/..;/sync", refused, ""},
		{"/registry/x;jsessionid=1", refused, ""},
		{"/registry/a[b]", refused, ""},
	} {
		fwd, dec, ok := normalisePath(c.in)
		if c.fwd == refused {
			if ok && strings.HasPrefix(c.in, "/registry") {
				t.Errorf("%s: forwarded as %s, want refused", c.in, fwd)
			}
			continue
		}
		if !ok || fwd != c.fwd || dec != c.dec {
			t.Errorf("%s: %q %q %v, want %q %q", c.in, fwd, dec, ok, c.fwd, c.dec)
		}
	}
}

// fuzzOps are the operations FuzzOperationAsUpstreamReads matches on: the
// issue's protected prefix, a DELETE-only operation and a method-specific
// one on a path with a dot.
func fuzzOps(tb testing.TB) *policy.Operations {
	ops, err := policy.NewOperations(policy.OperationsConfig{
		"registry:admin":    {Path: "/registry/admin/"},
		"registry:delete":   {Methods: []string{"DELETE"}, Path: "/registry/"},
		"registry:docs-put": {Methods: []string{"PUT"}, Path: "/registry/Docs/v1.0"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return ops
}

// upstreamReads is the path an upstream routes an escaped path to, as the
// lenient ones read it: net/http's decoding and cleaning, a Windows or
// IIS server's stripping of a trailing dot or space from each segment,
// and Express's (and IIS's, ASP.NET's) case-insensitive routing, with
// Unicode compatibility forms and case mappings that land in ASCII.
func upstreamReads(escaped string) (string, bool) {
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return "", false
	}
	p = path.Clean(p)
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = strings.ToLower(strings.ToUpper(norm.NFKC.String(strings.TrimRight(s, ". "))))
	}
	return strings.Join(segs, "/"), true
}

// FuzzOperationAsUpstreamReads holds keygate's operation to the one the
// upstream acts on: for any request path below /registry that keygate
// forwards, the operation it matched is the operation of the path a
// lenient upstream reads from what was forwarded (upstreamReads), decoded
// once or twice; and what is forwarded means what was received, with no
// unreserved character left encoded. Anything else keygate refuses.
func FuzzOperationAsUpstreamReads(f *testing.F) {
	for _, p := range []string{
		"/registry/admin/users", "/registry/%61dmin/users", "/registry/%61%64%6d%69%6e/users",
		"/registry/%61%64%6D%69%6E", "/registry/ADMIN/users", "/registry/Admin/x", "/registry/admin./x",
		"/registry/%2561dmin/users", "/registry/a%2Fb", "/registry/%2e%2e/sync", "/registry/admin%20/x",
		"/registry/%e2%84%aa", "/registry/docs/V1.0/x", "/registry/docs/v1%2e0", "/registry/d%6fcs/v1.0.",
		"/registry/a%20b/c", "/registry/%c3%a9", "/registry//admin", "/registry/./admin", "/registry/x/../admin",
	} {
		f.Add(uint8(0), p)
		f.Add(uint8(4), p)
	}
	ops := fuzzOps(f)
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions}
	f.Fuzz(func(t *testing.T, mi uint8, raw string) {
		method := methods[int(mi)%len(methods)]
		u, err := url.ParseRequestURI(raw)
		if err != nil || u.RawQuery != "" || u.Fragment != "" || match(u) != routeRegistry {
			return // net/http refuses it, or it is no registry request
		}
		in := u.EscapedPath()
		fwd, dec, ok := normalisePath(in)
		if !ok {
			return
		}
		if !strings.Contains(in, "%") && (fwd != in || dec != in) {
			t.Fatalf("%q: a path without escapes changed: %q %q", in, fwd, dec)
		}
		// What is forwarded means what was received.
		got, err := url.PathUnescape(fwd)
		if err != nil || got != dec {
			t.Fatalf("%q forwarded as %q, which decodes to %q (%v), not %q", in, fwd, got, err, dec)
		}
		if orig, _ := url.PathUnescape(in); orig != dec {
			t.Fatalf("%q decodes to %q, matched as %q", in, orig, dec)
		}
		for i := 0; i < len(fwd); i++ {
			if fwd[i] != '%' {
				continue
			}
			if b, _ := unhex2(fwd[i+1], fwd[i+2]); unreservedLetter(b) || strings.ToUpper(fwd[i:i+3]) != fwd[i:i+3] {
				t.Fatalf("%q forwarded as %q: %s is not in normal form", in, fwd, fwd[i:i+3])
			}
		}
		if strings.Contains(dec, "%") {
			t.Fatalf("%q: decoded %q still holds an escape (double decoding reads another path)", in, dec)
		}
		// The operation is the upstream's.
		want, ok := upstreamReads(fwd)
		if !ok {
			t.Fatalf("%q forwarded as %q, which an upstream cannot decode", in, fwd)
		}
		if want != "/registry" && !strings.HasPrefix(want, "/registry/") {
			t.Fatalf("%q forwarded as %q, which an upstream reads as %q, outside /registry", in, fwd, want)
		}
		if a, b := ops.Match(method, dec), ops.Match(method, want); a != b {
			t.Fatalf("%s %q forwarded as %q: keygate matched %s, the upstream reads %q, operation %s", method, in, fwd, ops.Name(a), want, ops.Name(b))
		}
	})
}

// BenchmarkNormalisePath: the common path, with no escape, costs no
// allocation.
func BenchmarkNormalisePath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := normalisePath("/registry/schemas/invoice-v2/versions/3"); !ok {
			b.Fatal("refused")
		}
	}
}
