package layers_test

import (
	"errors"
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/layers"
)

const module = "github.com/keygate/keygate/"

// outside are the directories not in the layering: test support, the
// end-to-end tests, the benchmark and the deployment files.
var outside = []string{"e2e", "differential", "bench", "deploy", "artifacts", "docs", "scripts",
	"internal/testkit", "internal/redistest", "internal/oidctest", "internal/browsertest",
	"internal/pebbletest", "internal/oauth2test", "internal/audittest", "internal/keystoretest"}

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
