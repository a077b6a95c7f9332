package layers_test

import (
	"errors"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/layers"
)

const module = "github.com/keygate/keygate/"

// outside are the directories not in the layering: test support, the
// end-to-end tests, the benchmark and the deployment files.
var outside = []string{"e2e", "differential", "bench", "deploy", "artifacts", "docs", "scripts",
	"internal/testsupport"}

// TestImportsPointDown: every package of the module has a layer, and its
// (non-test) imports within the module are all of lower layers.
func TestImportsPointDown(t *testing.T) {
	layer := map[string]int{}
	for i, ps := range layers.Layers {
		for _, p := range ps {
			layer[p] = i
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		for _, o := range outside {
			if rel == o || strings.HasPrefix(rel, o+"/") {
				return filepath.SkipDir
			}
		}
		pkg, ierr := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(ierr, &noGo) {
			return nil // no Go package here
		}
		if ierr != nil {
			return ierr
		}
		seen++
		mine, ok := layer[rel]
		if !ok {
			t.Errorf("package %s has no layer in internal/layers", rel)
			return nil
		}
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			l, ok := layer[dep]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which has no layer", rel, dep)
			case l >= mine:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", rel, mine, dep, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 25 {
		t.Fatalf("only %d packages found; is the walk rooted at the module?", seen)
	}
}

// forbidden are imports no file of the module (tests included) may use,
// with the reason.
var forbidden = map[string]string{
	"github.com/go-jose/go-jose": "keygate signs and verifies JOSE with github.com/lestrrat-go/jwx/v3 only " +
		"(go-jose stays an indirect dependency of go-oidc, which verifies the portal's ID tokens)",
	"gopkg.in/square/go-jose":   "keygate signs and verifies JOSE with github.com/lestrrat-go/jwx/v3 only",
	"github.com/golang-jwt/jwt": "keygate signs and verifies JOSE with github.com/lestrrat-go/jwx/v3 only",
	"gopkg.in/yaml.v3":          "archived; use go.yaml.in/yaml/v3, its maintained successor",
}

// TestNoForbiddenImports: one JOSE stack, one YAML library.
func TestNoForbiddenImports(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata" || d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		pkg, ierr := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(ierr, &noGo) {
			return nil
		}
		if ierr != nil {
			return ierr
		}
		rel, _ := filepath.Rel(root, path)
		for _, imps := range [][]string{pkg.Imports, pkg.TestImports, pkg.XTestImports} {
			for _, imp := range imps {
				for bad, why := range forbidden {
					if imp == bad || strings.HasPrefix(imp, bad+"/") {
						t.Errorf("%s imports %s: %s", rel, imp, why)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestModelWithoutEngine: the packages that only name a limit, a plan or
// a permission get them from policy, which imports neither Redis nor a
// circuit breaker, and they do not import the ratelimit engines for it.
// (keystore reaches Redis through its own store and redisconn; that is
// not the model's doing.) The check is `go list -deps`, as a user would
// run it.
func TestModelWithoutEngine(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go not in PATH: %v", err)
	}
	deps := func(pkg string) map[string]bool {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		m := map[string]bool{}
		for _, l := range strings.Fields(string(out)) {
			m[l] = true
		}
		return m
	}
	for dep := range deps("policy") {
		for _, engine := range []string{"github.com/redis/go-redis", "github.com/sony/gobreaker", module + "ratelimit"} {
			if strings.HasPrefix(dep, engine) {
				t.Errorf("policy depends on %s", dep)
			}
		}
	}
	for _, pkg := range []string{"keystore", "auth", "keyops", "portal", "adminapi"} {
		d := deps(pkg)
		if d[module+"ratelimit"] {
			t.Errorf("%s depends on ratelimit (and through it on go-redis and gobreaker); it should name limits through policy", pkg)
		}
		if !d[module+"policy"] {
			t.Errorf("%s does not depend on policy; is the check still meaningful?", pkg)
		}
	}
}
