package policy

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/keygate/keygate/internal/fieldpath"
	"github.com/keygate/keygate/product"
)

// The built-in operations. Every key may perform every operation of its
// product unless its permissions, its consumer's or its plan's features
// leave one out.
const (
	// OpExtractionSync is POST /sync.
	OpExtractionSync = "extraction:sync"
	// OpRegistryRead is GET and HEAD under /registry/.
	OpRegistryRead = "registry:read"
	// OpRegistryWrite is every other method under /registry/.
	OpRegistryWrite = "registry:write"
)

// MaxOperations bounds the operations (built-in and custom) so that a set
// of them is one machine word (OpSet).
const MaxOperations = 64

// OperationDef is an operation as the configuration defines it
// (`operations.NAME`): the methods and the path prefix it covers within
// its product, which is the part of its name before the colon.
type OperationDef struct {
	// Methods are the HTTP methods it covers; empty means every method no
	// more specific operation of the same path claims.
	Methods []string `yaml:"methods"`
	// Path is the path prefix, segment by segment: "/registry/docs"
	// covers /registry/docs and everything below it, not /registry/docsx.
	// It is compared without regard to ASCII letter case (/registry/DOCS
	// is covered too: upstreams such as Express, IIS and ASP.NET route it
	// to the same handler), and it is written in ASCII letters, digits and
	// "-._~!$&'()*+,=:@" only.
	Path string `yaml:"path"`
}

// OperationsConfig is the `operations:` section: custom operations by
// name, in addition to the built-in ones.
type OperationsConfig map[string]OperationDef

// Op is the index of an operation in its Operations; NoOp matches nothing.
type Op int8

// NoOp is the Op of a request no operation covers.
const NoOp Op = -1

// OpSet is a set of operations of one Operations, one bit each.
type OpSet uint64

// Has reports whether s holds op.
func (s OpSet) Has(op Op) bool { return op >= 0 && s&(1<<uint(op)) != 0 }

// operation is a compiled OperationDef.
type operation struct {
	name    string
	product string
	methods []string // nil: any method
	path    string   // without a trailing "/", ASCII letters in lower case
}

// Operations is the compiled table of operations: it matches a request to
// its operation, and turns names into sets. It is immutable and safe for
// concurrent use.
type Operations struct {
	ops   []operation // index = Op
	order []Op        // most specific first
	index map[string]Op
	all   map[string]OpSet // by product
}

// opName is what an operation may be called: product:word.
var opName = regexp.MustCompile(`^([a-z]+):[a-z0-9][a-z0-9_.-]{0,62}$`)

// ValidOperationName reports whether name has the shape of an operation's
// name (product:word); whether it is configured is Operations.Check's.
func ValidOperationName(name string) bool {
	m := opName.FindStringSubmatch(name)
	return m != nil && product.Valid(m[1])
}

// builtin are the built-in operations.
var builtin = []struct {
	name string
	def  OperationDef
}{
	{OpExtractionSync, OperationDef{Methods: []string{http.MethodPost}, Path: "/sync"}},
	{OpRegistryRead, OperationDef{Methods: []string{http.MethodGet, http.MethodHead}, Path: "/registry/"}},
	{OpRegistryWrite, OperationDef{Path: "/registry/"}},
}

// knownMethods are the methods the gateway accepts at all.
var knownMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// BuiltinOperations returns the table of the built-in operations only.
func BuiltinOperations() *Operations {
	o, err := NewOperations(nil)
	if err != nil {
		panic(err) // the built-in ones are fixed
	}
	return o
}

// NewOperations compiles the built-in operations and cfg's. Errors name
// the field (operations.NAME.path, …): a name that is not product:word of
// a known product, a path outside its product's routes, a method the
// gateway or the route does not accept (unreachable), or two operations
// that cover the same method on the same path (overlapping).
func NewOperations(cfg OperationsConfig) (*Operations, error) {
	o := &Operations{index: map[string]Op{}, all: map[string]OpSet{}}
	add := func(name string, d OperationDef) {
		m := opName.FindStringSubmatch(name)
		op := operation{name: name, product: m[1], path: strings.ToLower(strings.TrimSuffix(d.Path, "/"))}
		if len(d.Methods) > 0 {
			op.methods = append([]string(nil), d.Methods...)
			for i := range op.methods {
				op.methods[i] = strings.ToUpper(op.methods[i])
			}
			sort.Strings(op.methods)
		}
		o.index[name] = Op(len(o.ops))
		o.all[op.product] |= 1 << uint(len(o.ops))
		o.ops = append(o.ops, op)
	}
	for _, b := range builtin {
		add(b.name, b.def)
	}
	names := make([]string, 0, len(cfg))
	for n := range cfg {
		names = append(names, n)
	}
	sort.Strings(names)
	var v fieldpath.First
	for _, name := range names {
		d, path := cfg[name], "operations."+name
		m := opName.FindStringSubmatch(name)
		switch {
		case m == nil || !product.Valid(m[1]):
			v.Bad(path, "an operation is named PRODUCT:NAME with a product of %v, such as registry:delete", product.All())
			continue
		case o.has(name):
			v.Bad(path, "%s is built in; name a custom operation differently", name)
			continue
		}
		if bad := checkPath(m[1], d.Path); bad != "" {
			v.Bad(path+".path", "%s", bad)
			continue
		}
		if bad := checkMethods(m[1], d.Methods); bad != "" {
			v.Bad(path+".methods", "%s", bad)
			continue
		}
		if len(o.ops) == MaxOperations {
			v.Bad(path, "at most %d operations (built-in ones included)", MaxOperations)
			continue
		}
		add(name, d)
		if other := o.overlap(Op(len(o.ops) - 1)); other != "" {
			v.Bad(path, "overlaps %s: both cover the same method on path %s; make one of them cover other methods or a longer path", other, d.Path)
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	o.order = make([]Op, len(o.ops))
	for i := range o.order {
		o.order[i] = Op(i)
	}
	// Longer paths first; at equal paths, named methods before "any".
	sort.SliceStable(o.order, func(i, j int) bool {
		a, b := o.ops[o.order[i]], o.ops[o.order[j]]
		if len(a.path) != len(b.path) {
			return len(a.path) > len(b.path)
		}
		return a.methods != nil && b.methods == nil
	})
	return o, nil
}

func (o *Operations) has(name string) bool { _, ok := o.index[name]; return ok }

// checkPath says what is wrong with an operation path of prod; "" if
// nothing.
func checkPath(prod, p string) string {
	switch {
	case p == "":
		return "required: the path prefix the operation covers, such as /registry/docs"
	case prod == product.Extraction && p != "/sync":
		return fmt.Sprintf("extraction has one path, /sync; %q is unreachable", p)
	case prod == product.Registry && p != "/registry" && !strings.HasPrefix(p, "/registry/"):
		return fmt.Sprintf("registry operations live under /registry/; %q is unreachable", p)
	case !canonicalPrefix(p):
		return fmt.Sprintf("%q is not a canonical path prefix (no empty segments, no segment ending in \".\", only ASCII letters, digits and -._~!$&'()*+,=:@); no request path can match it", p)
	}
	return ""
}

// canonicalPrefix reports whether p could be the path of a request the
// gateway lets through: segments that are neither empty (a trailing "/"
// aside) nor end in a dot ("." and ".." among them), made of the bytes a
// path may hold literally (RFC 3986 pchar, less ";", which upstreams read
// as path parameters). Anything else the gateway refuses in a request
// path, so an operation on it would be unreachable.
func canonicalPrefix(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "" {
			if i != len(segs)-1 {
				return false
			}
			continue
		}
		if s[len(s)-1] == '.' {
			return false
		}
		for j := 0; j < len(s); j++ {
			if !PathByte(s[j]) {
				return false
			}
		}
	}
	return true
}

// PathByte reports whether c may stand literally in a path segment the
// gateway forwards: an ASCII letter or digit, or one of "-._~" (RFC 3986
// unreserved) and "!$&'()*+,=:@" (sub-delims, ":" and "@", less ";").
func PathByte(c byte) bool {
	switch {
	case c < 64:
		return pathBytesLow&(1<<c) != 0
	case c < 128:
		return pathBytesHigh&(1<<(c-64)) != 0
	}
	return false
}

// The bytes of PathByte as bit sets: bytes 0-63 and 64-127.
const (
	pathBytesLow uint64 = (1<<10-1)<<'0' | 1<<'-' | 1<<'.' | 1<<'!' | 1<<'$' | 1<<'&' | 1<<'\'' |
		1<<'(' | 1<<')' | 1<<'*' | 1<<'+' | 1<<',' | 1<<'=' | 1<<':'
	pathBytesHigh uint64 = (1<<26-1)<<('A'-64) | (1<<26-1)<<('a'-64) | 1<<('_'-64) | 1<<('~'-64) | 1<<('@'-64)
)

// checkMethods says what is wrong with an operation's methods; "" if
// nothing.
func checkMethods(prod string, ms []string) string {
	seen := map[string]bool{}
	for _, m := range ms {
		u := strings.ToUpper(m)
		switch {
		case !contains(knownMethods, u):
			return fmt.Sprintf("%q is not a method the gateway accepts (%v); the operation would be unreachable", m, knownMethods)
		case prod == product.Extraction && u != http.MethodPost:
			return fmt.Sprintf("/sync accepts POST only; %s is unreachable", u)
		case seen[u]:
			return fmt.Sprintf("%s is listed twice", u)
		}
		seen[u] = true
	}
	return ""
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// overlap returns the name of an operation that covers a method of i on
// the same path, or "".
func (o *Operations) overlap(i Op) string {
	a := o.ops[i]
	for j := Op(0); j < i; j++ {
		b := o.ops[j]
		if b.path != a.path {
			continue
		}
		if a.methods == nil && b.methods == nil {
			return b.name
		}
		for _, m := range a.methods {
			if contains(b.methods, m) {
				return b.name
			}
		}
	}
	return ""
}

// covers reports whether path p lies under prefix (segment-wise, ASCII
// letters in any case; prefix is in lower case).
func covers(prefix, p string) bool {
	if len(p) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := p[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return len(p) == len(prefix) || p[len(prefix)] == '/'
}

// Match returns the most specific operation covering method on path, or
// NoOp. The path is the request's as an upstream reads it: percent-decoded
// (the gateway refuses the encodings that would decode into another path:
// see gateway's normalisePath). Letter case does not matter: an upstream
// that ignores it routes /registry/ADMIN where /registry/admin goes, so
// the request gets the operation of the lower-case path.
func (o *Operations) Match(method, path string) Op {
	for _, i := range o.order {
		op := &o.ops[i]
		if !covers(op.path, path) {
			continue
		}
		if op.methods == nil || contains(op.methods, method) {
			return i
		}
	}
	return NoOp
}

// Name is op's name; "" for NoOp.
func (o *Operations) Name(op Op) string {
	if op < 0 || int(op) >= len(o.ops) {
		return ""
	}
	return o.ops[op].name
}

// Product is op's product.
func (o *Operations) Product(op Op) string {
	if op < 0 || int(op) >= len(o.ops) {
		return ""
	}
	return o.ops[op].product
}

// Names returns every operation's name, built-in ones first.
func (o *Operations) Names() []string {
	n := make([]string, len(o.ops))
	for i, op := range o.ops {
		n[i] = op.name
	}
	return n
}

// OfProducts is the set of every operation of the products.
func (o *Operations) OfProducts(products ...string) OpSet {
	var s OpSet
	for _, p := range products {
		s |= o.all[p]
	}
	return s
}

// All is the set of every operation.
func (o *Operations) All() OpSet { return OpSet(1)<<uint(len(o.ops)) - 1 }

// UnknownOperationError is a name that is no operation.
type UnknownOperationError struct {
	Name  string
	Known []string
}

func (e *UnknownOperationError) Error() string {
	return fmt.Sprintf("unknown operation %q (the operations are %s)", e.Name, strings.Join(e.Known, ", "))
}

// Set turns names into a set; an unknown name is an *UnknownOperationError.
func (o *Operations) Set(names []string) (OpSet, error) {
	var s OpSet
	for _, n := range names {
		i, ok := o.index[n]
		if !ok {
			return 0, &UnknownOperationError{Name: n, Known: o.Names()}
		}
		s |= 1 << uint(i)
	}
	return s, nil
}

// Check returns nil when every name is an operation, else an
// *UnknownOperationError for the first that is not.
func (o *Operations) Check(names []string) error {
	_, err := o.Set(names)
	return err
}

// NamesOf returns the names of s's operations, in table order.
func (o *Operations) NamesOf(s OpSet) []string {
	var n []string
	for i, op := range o.ops {
		if s.Has(Op(i)) {
			n = append(n, op.name)
		}
	}
	return n
}
