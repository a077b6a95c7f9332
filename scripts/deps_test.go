// Package scripts holds the test that keeps scripts/deps.txt, the one list
// install-deps.sh installs from, complete: every program the Go code looks
// up or runs must be in it, or `make test` fails on a fresh machine.
package scripts

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// dynamic names the lookups whose program is not a string the code spells
// out, by file and expression, with the programs they run (none: a binary
// the test or bench builds itself). A lookup that is neither spelled out nor
// listed here fails the test, and so does an entry here that matches
// nothing, so the list stays exact.
var dynamic = map[string][]string{
	// keygate binaries the tests and benches build with `go build`.
	"e2e/demo_test.go: binary":                       nil,
	"e2e/harness_test.go: binary":                    nil,
	"e2e/readme_test.go: binary":                     nil,
	"e2e/memlimit_test.go: binary":                   nil,
	"e2e/e2e_test.go: binary":                        nil,
	"bench/peers/run.go: bin":                        nil,
	"bench/churn/run.go: b.bin":                      nil,
	"bench/churn/report.go: b.self":                  nil,
	"bench/internal/benchproc/buildrev_test.go: bin": nil,
	// The bench's own processes: argv built from the targets' table,
	// whose peers bench/peers/run.go looks up with benchproc.LookPath
	// (counted there).
	"bench/peers/run.go: args[0]":       nil,
	"bench/churn/run.go: args[0]":       nil,
	"deploy/observability_test.go: bin": {"promtool"},
	// traefikVersion runs the traefik traefikBin found (`traefik version`).
	"bench/peers/traefik.go: exe": {"traefik"},
	// benchproc.LookPath itself: its callers' names are counted.
	"bench/internal/benchproc/benchproc.go: n": nil,
	// The differential tests' parser servers (the specs table).
	"differential/harness_test.go: argv[0]": {"python3", "node"},
	// browsertest.Chromium(): $CHROMIUM or /usr/bin/chromium.
	"internal/testsupport/browsertest/browsertest.go: path": {"chromium"},
	// redistest: redis-server, found by exec.LookPath in Binary.
	"internal/testsupport/redistest/redistest.go: Binary(s.t)": {"redis-server"},
	"internal/testsupport/redistest/cluster.go: cli":           {"redis-cli"},
	"keystore/redis_durable_test.go: cli":                      {"redis-cli"},
}

// TestDepsListHasEveryProgram: every program a Go file of the module looks
// up or runs is in scripts/deps.txt.
func TestDepsListHasEveryProgram(t *testing.T) {
	t.Parallel()
	listed := readDeps(t, "deps.txt")
	found, unresolved := scanTree(t, "..")
	if len(found) == 0 {
		t.Fatal("found no program lookups at all: the scan is broken")
	}
	for _, msg := range missing(found, unresolved, listed) {
		t.Error(msg)
	}
	var names []string
	for p := range found {
		names = append(names, p)
	}
	sort.Strings(names)
	t.Logf("programs looked up: %s", strings.Join(names, " "))
}

// TestDepsListFailsWithoutAnEntry: for each program the tree looks up,
// deps.txt without its line fails, naming the program and where it is
// looked up.
func TestDepsListFailsWithoutAnEntry(t *testing.T) {
	t.Parallel()
	listed := readDeps(t, "deps.txt")
	found, unresolved := scanTree(t, "..")
	all := map[string]bool{}
	for p := range found {
		all[p] = true
	}
	for _, progs := range dynamic {
		for _, p := range progs {
			all[p] = true
		}
	}
	for _, must := range []string{"wrk", "h2load", "nginx", "haproxy", "caddy", "redis-server", "traefik", "promtool", "podman", "node", "python3", "chromium"} {
		if !all[must] {
			t.Errorf("the scan did not find %s, which the tree looks up", must)
		}
	}
	for prog := range found {
		without := map[string]bool{}
		for n := range listed {
			if n != prog {
				without[n] = true
			}
		}
		msgs := missing(found, unresolved, without)
		if got := strings.Join(msgs, "\n"); !strings.Contains(got, fmt.Sprintf("%q is looked up (", prog)) || !strings.Contains(got, "scripts/deps.txt does not list it") {
			t.Errorf("without %s the check says %q", prog, msgs)
		}
	}
}

// TestScanSources: the scan over synthetic sources finds the lookups of
// each form the tree uses, and reports a program it cannot name.
func TestScanSources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		src        string
		want       []string // programs found
		unresolved []string
	}{
		{"LookPath", `exec.LookPath("wrk")`, []string{"wrk"}, nil},
		{"Command", `exec.Command("git", "status")`, []string{"git"}, nil},
		{"CommandContext", `exec.CommandContext(ctx, "h2load", "-c1")`, []string{"h2load"}, nil},
		{"an absolute path", `exec.Command("/usr/bin/python3", "x.py")`, []string{"python3"}, nil},
		{"benchproc.LookPath, every name", `benchproc.LookPath("nginx", "openresty")`, []string{"nginx", "openresty"}, nil},
		{"a variable set from a literal", `py := "/usr/bin/python3"; if x { py = "python3" }; exec.Command(py)`, []string{"python3"}, nil},
		{"a variable set from a lookup", `wrk := benchproc.LookPath("wrk"); exec.CommandContext(ctx, wrk)`, []string{"wrk"}, nil},
		{"the peer table: a parameter of a func literal", `peer := func(name, bin string) string { return benchproc.LookPath(bin) }
			peer("nginx-lua", "nginx"); peer("haproxy", "haproxy")`, []string{"nginx", "haproxy"}, nil},
		{"a parameter of a declared func", `run("caddy")`, []string{"caddy"}, nil},
		{"a range over a variadic parameter", `need := func(names ...string) { for _, n := range names { benchproc.LookPath(n) } }
			need("wrk", "h2load"); need("caddy")`, []string{"wrk", "h2load", "caddy"}, nil},
		{"a range over a slice literal", `for _, n := range []string{"nginx", "haproxy"} { exec.LookPath(n) }`, []string{"nginx", "haproxy"}, nil},
		{"a program it cannot name", `exec.Command(os.Getenv("X"))`, nil, []string{`x.go: os.Getenv("X")`}},
		{"a field", `exec.Command(b.bin)`, nil, []string{"x.go: b.bin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := "package x\nfunc f() {\n" + tc.src + "\n}\n"
			if strings.Contains(tc.src, "run(") {
				src += "func run(prog string) { exec.Command(prog) }\n"
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", src, 0)
			if err != nil {
				t.Fatal(err)
			}
			found, unresolved := map[string][]string{}, map[string]bool{}
			scanFile(fset, "x.go", f, found, unresolved)
			var got []string
			for p := range found {
				got = append(got, p)
			}
			sort.Strings(got)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("found %q, want %q", got, want)
			}
			var un []string
			for u := range unresolved {
				un = append(un, u)
			}
			sort.Strings(un)
			if strings.Join(un, "|") != strings.Join(tc.unresolved, "|") {
				t.Errorf("unresolved %q, want %q", un, tc.unresolved)
			}
		})
	}
}

// TestReadDeps: deps.txt's format; a line install-deps.sh could not act
// on fails.
func TestReadDeps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		want       []string
		err        string
	}{
		{"entries and comments", "# c\n\nwrk apt:wrk\nbusboy npm:differential/parsers/busboy file:x\ngo prerequisite\n", []string{"busboy", "go", "wrk"}, ""},
		{"a Go module", "traefik go:github.com/traefik/traefik/v3@v3.6.12\n", []string{"traefik"}, ""},
		{"no source", "wrk\n", nil, "line 1: wrk has no source"},
		{"unknown source", "wrk brew:wrk\n", nil, `line 1: wrk: unknown source "brew:wrk"`},
		{"unknown check", "wrk apt:wrk exists:/x\n", nil, `line 1: wrk: unknown check "exists:/x"`},
		{"twice", "wrk apt:wrk\nwrk apt:wrk\n", nil, "line 2: wrk is listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDeps(strings.NewReader(tc.text))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			sort.Strings(names)
			if strings.Join(names, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got %q, want %q", names, tc.want)
			}
		})
	}
}

// missing returns one message for each program found (with where it is
// looked up) that listed lacks, for each lookup it could not name that
// dynamic does not list, and for each entry of dynamic that matched none.
func missing(found map[string][]string, unresolved map[string]bool, listed map[string]bool) []string {
	var msgs []string
	need := map[string][]string{}
	for p, where := range found {
		need[p] = append([]string(nil), where...)
	}
	for k, progs := range dynamic {
		if !unresolved[k] {
			msgs = append(msgs, fmt.Sprintf("scripts/deps_test.go: dynamic lists %q, which the tree no longer has: remove it", k))
			continue
		}
		for _, p := range progs {
			need[p] = append(need[p], k)
		}
	}
	for u := range unresolved {
		if _, ok := dynamic[u]; !ok {
			msgs = append(msgs, fmt.Sprintf("%s: cannot tell which program this runs: spell it out, or list it in scripts/deps_test.go's dynamic with the programs it runs", u))
		}
	}
	for p, where := range need {
		if !listed[p] {
			sort.Strings(where)
			msgs = append(msgs, fmt.Sprintf("%q is looked up (%s) but scripts/deps.txt does not list it: add it with its Debian or npm package", p, where[0]))
		}
	}
	sort.Strings(msgs)
	return msgs
}

// readDeps reads deps.txt's names.
func readDeps(t *testing.T, p string) map[string]bool {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := parseDeps(f)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return m
}

// parseDeps parses deps.txt as install-deps.sh reads it: NAME SOURCE
// [CHECK...], # comments.
func parseDeps(r io.Reader) (map[string]bool, error) {
	m := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: %s has no source", n, f[0])
		}
		if s := f[1]; s != "prerequisite" && !strings.HasPrefix(s, "apt:") && !strings.HasPrefix(s, "npm:") && !strings.HasPrefix(s, "go:") {
			return nil, fmt.Errorf("line %d: %s: unknown source %q", n, f[0], s)
		}
		for _, c := range f[2:] {
			if !strings.HasPrefix(c, "cmd:") && !strings.HasPrefix(c, "file:") && !strings.HasPrefix(c, "py:") {
				return nil, fmt.Errorf("line %d: %s: unknown check %q", n, f[0], c)
			}
		}
		if m[f[0]] {
			return nil, fmt.Errorf("line %d: %s is listed twice", n, f[0])
		}
		m[f[0]] = true
	}
	return m, sc.Err()
}

// scanTree parses every .go file under root (not testdata, node_modules
// or hidden directories) and returns the programs looked up, each with
// the places ("file:line"), and the lookups it could not name ("file:
// expr").
func scanTree(t *testing.T, root string) (map[string][]string, map[string]bool) {
	t.Helper()
	found, unresolved := map[string][]string{}, map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		scanFile(fset, filepath.ToSlash(rel), f, found, unresolved)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found, unresolved
}

// scanFile adds the program lookups of f, named name, to found and the
// ones it cannot name to unresolved.
func scanFile(fset *token.FileSet, name string, f *ast.File, found map[string][]string, unresolved map[string]bool) {
	s := &scanner{fset: fset, name: name, file: f}
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, n)
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var args []ast.Expr
		switch callee(call) {
		case "exec.LookPath", "exec.Command":
			args = call.Args[:min(1, len(call.Args))]
		case "exec.CommandContext":
			if len(call.Args) > 1 {
				args = call.Args[1:2]
			}
		case "benchproc.LookPath":
			args = call.Args
		}
		for _, a := range args {
			progs, ok := s.resolve(a, stack, 0)
			if !ok {
				unresolved[name+": "+exprString(fset, a)] = true
				continue
			}
			where := fmt.Sprintf("%s:%d", name, fset.Position(a.Pos()).Line)
			for _, p := range progs {
				found[p] = append(found[p], where)
			}
		}
		return true
	})
}

type scanner struct {
	fset *token.FileSet
	name string
	file *ast.File
}

// callee is "pkg.Func" or "Func" for a call, "" otherwise.
func callee(c *ast.CallExpr) string {
	switch fn := c.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok {
			return x.Name + "." + fn.Sel.Name
		}
	}
	return ""
}

// resolve names the programs e may hold, its enclosing nodes being stack;
// ok is false when it cannot name them.
func (s *scanner) resolve(e ast.Expr, stack []ast.Node, depth int) (progs []string, ok bool) {
	if depth > 4 {
		return nil, false
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return nil, false
		}
		v, err := strconv.Unquote(e.Value)
		if err != nil || v == "" {
			return nil, false
		}
		return []string{path.Base(v)}, true
	case *ast.ParenExpr:
		return s.resolve(e.X, stack, depth+1)
	case *ast.CompositeLit: // []string{"a", "b"}: each
		var all []string
		for _, el := range e.Elts {
			p, ok := s.resolve(el, stack, depth+1)
			if !ok {
				return nil, false
			}
			all = append(all, p...)
		}
		return all, len(all) > 0
	case *ast.CallExpr:
		// A lookup's result is the program it looked up (counted there).
		switch callee(e) {
		case "exec.LookPath", "benchproc.LookPath":
			var all []string
			for _, a := range e.Args {
				p, ok := s.resolve(a, stack, depth+1)
				if !ok {
					return nil, false
				}
				all = append(all, p...)
			}
			return all, len(all) > 0
		}
		return nil, false
	case *ast.Ident:
		return s.resolveIdent(e.Name, stack, depth)
	}
	return nil, false
}

// resolveIdent names the programs the variable name may hold: the values
// assigned to it in the enclosing functions, or, for a parameter, the
// arguments its function is called with in this file.
func (s *scanner) resolveIdent(name string, stack []ast.Node, depth int) ([]string, bool) {
	for i := len(stack) - 1; i >= 0; i-- {
		var ft *ast.FuncType
		var body *ast.BlockStmt
		switch fn := stack[i].(type) {
		case *ast.FuncDecl:
			ft, body = fn.Type, fn.Body
		case *ast.FuncLit:
			ft, body = fn.Type, fn.Body
		default:
			continue
		}
		if idx, variadic := paramIndex(ft, name); idx >= 0 {
			return s.callArgs(stack[:i+1], idx, variadic, depth)
		}
		var progs []string
		assigned, ok := false, true
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				return false // another scope
			case *ast.RangeStmt:
				if id, isID := n.Value.(*ast.Ident); isID && id.Name == name {
					assigned = true
					p, pok := s.resolve(n.X, stack[:i+1], depth+1)
					ok = ok && pok
					progs = append(progs, p...)
				}
			case *ast.AssignStmt:
				for j, l := range n.Lhs {
					if id, isID := l.(*ast.Ident); isID && id.Name == name && len(n.Rhs) == len(n.Lhs) {
						assigned = true
						if lit, isLit := n.Rhs[j].(*ast.BasicLit); isLit && lit.Value == `""` {
							continue // not found
						}
						p, pok := s.resolve(n.Rhs[j], stack[:i+1], depth+1)
						ok = ok && pok
						progs = append(progs, p...)
					}
				}
			case *ast.ValueSpec:
				for j, id := range n.Names {
					if id.Name == name && j < len(n.Values) {
						assigned = true
						p, pok := s.resolve(n.Values[j], stack[:i+1], depth+1)
						ok = ok && pok
						progs = append(progs, p...)
					}
				}
			}
			return true
		})
		if assigned {
			return progs, ok && len(progs) > 0
		}
	}
	return nil, false
}

// paramIndex is the index of name among ft's parameters, or -1, and
// whether it is variadic.
func paramIndex(ft *ast.FuncType, name string) (int, bool) {
	i := 0
	for _, f := range ft.Params.List {
		for _, n := range f.Names {
			if n.Name == name {
				_, variadic := f.Type.(*ast.Ellipsis)
				return i, variadic
			}
			i++
		}
		if len(f.Names) == 0 {
			i++
		}
	}
	return -1, false
}

// callArgs names the programs passed as argument idx to the function
// that ends stack (a declared function, or a func literal assigned to a
// variable), from its calls in this file (a variadic one: every argument
// from idx on); only literal arguments count.
func (s *scanner) callArgs(stack []ast.Node, idx int, variadic bool, depth int) ([]string, bool) {
	fnName := ""
	switch fn := stack[len(stack)-1].(type) {
	case *ast.FuncDecl:
		if fn.Recv == nil {
			fnName = fn.Name.Name
		}
	case *ast.FuncLit:
		if len(stack) >= 2 {
			if as, ok := stack[len(stack)-2].(*ast.AssignStmt); ok && len(as.Lhs) == 1 {
				if id, ok := as.Lhs[0].(*ast.Ident); ok {
					fnName = id.Name
				}
			}
		}
	}
	if fnName == "" {
		return nil, false
	}
	var progs []string
	ok, calls := true, 0
	ast.Inspect(s.file, func(n ast.Node) bool {
		c, isCall := n.(*ast.CallExpr)
		if !isCall || callee(c) != fnName || idx >= len(c.Args) {
			return true
		}
		calls++
		args := c.Args[idx : idx+1]
		if variadic {
			args = c.Args[idx:]
		}
		for _, a := range args {
			p, pok := s.resolve(a, nil, depth+1)
			ok = ok && pok
			progs = append(progs, p...)
		}
		return true
	})
	return progs, ok && calls > 0
}

func exprString(fset *token.FileSet, e ast.Expr) string {
	var b strings.Builder
	_ = printer.Fprint(&b, fset, e)
	return b.String()
}
