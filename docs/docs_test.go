// Package docs_test checks the docs against the code and against
// themselves: each reference lists what the code has, no page but
// bench/results carries a dated run, and every link and anchor resolves.
package docs_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/keygate/keygate/cli"
	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/gateway"
)

// root is the module's root, from this package's directory.
const root = ".."

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("%v (the references live under docs/reference/)", err)
	}
	return string(b)
}

// TestCLIReference: docs/reference/cli.md's first ```text block is what
// `keygate help` prints.
func TestCLIReference(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	if code := cli.Main([]string{"help"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("keygate help: exit %d: %s", code, errb.String())
	}
	doc := readDoc(t, "docs/reference/cli.md")
	block, line, ok := fencedBlock(doc, "text")
	if !ok {
		t.Fatal("docs/reference/cli.md has no ```text block with `keygate help`'s output")
	}
	if msg := firstDifference(block, out.String()); msg != "" {
		t.Errorf("docs/reference/cli.md:%d: the ```text block is not `keygate help`'s output: %s", line, msg)
	}
}

// fencedBlock is the body of the first ```lang block of doc, and the
// line of its opening fence.
func fencedBlock(doc, lang string) (string, int, bool) {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "```"+lang {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				return strings.Join(lines[i+1:j], "\n") + "\n", i + 1, true
			}
		}
	}
	return "", 0, false
}

// firstDifference says where doc and want first differ, "" when equal
// (trailing spaces aside).
func firstDifference(doc, want string) string {
	d := strings.Split(strings.TrimRight(doc, "\n"), "\n")
	w := strings.Split(strings.TrimRight(want, "\n"), "\n")
	for i := 0; i < len(d) || i < len(w); i++ {
		var dl, wl string
		if i < len(d) {
			dl = strings.TrimRight(d[i], " ")
		}
		if i < len(w) {
			wl = strings.TrimRight(w[i], " ")
		}
		if dl != wl {
			return fmt.Sprintf("block line %d is %q, want %q", i+1, dl, wl)
		}
	}
	return ""
}

// TestConfigReference: every key of config.Default(), as a dotted path
// of its yaml names, appears in docs/reference/config.md.
func TestConfigReference(t *testing.T) {
	t.Parallel()
	keys := configKeys(reflect.TypeOf(config.Default()), "")
	if len(keys) < 20 {
		t.Fatalf("found only %d config keys: %v", len(keys), keys)
	}
	doc := readDoc(t, "docs/reference/config.md")
	for _, k := range missingWords(doc, keys) {
		t.Errorf("docs/reference/config.md lacks the config key %s", k)
	}
}

// configKeys lists the dotted yaml paths of t's leaves below prefix: a
// struct's fields are walked; a map, slice or type that reads its own
// yaml is one key.
func configKeys(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || readsOwnYAML(t) {
		if prefix == "" {
			return nil
		}
		return []string{prefix}
	}
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			keys = append(keys, configKeys(f.Type, prefix)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		keys = append(keys, configKeys(f.Type, p)...)
	}
	return keys
}

// readsOwnYAML reports whether t (or *t) unmarshals itself from yaml or
// text, so that its fields are not keys.
func readsOwnYAML(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	for _, m := range []string{"UnmarshalYAML", "UnmarshalText"} {
		if _, ok := p.MethodByName(m); ok {
			return true
		}
	}
	return false
}

// missingWords returns the words of want that doc lacks as a whole word:
// not inside a longer name (a key followed by ".x" is still there).
func missingWords(doc string, want []string) []string {
	var miss []string
	for _, w := range want {
		re := regexp.MustCompile(`(^|[^A-Za-z0-9_.])` + regexp.QuoteMeta(w) + `($|[^A-Za-z0-9_])`)
		if !re.MatchString(doc) {
			miss = append(miss, w)
		}
	}
	return miss
}

// TestMissingWords: a key inside a longer key is not the key.
func TestMissingWords(t *testing.T) {
	t.Parallel()
	doc := "| `server.listen` | x |\n`keystore.resync_interval_max`\n`tls.acme`.email"
	got := missingWords(doc, []string{"server.listen", "keystore.resync_interval", "tls.acme", "listen", "acme.email"})
	if strings.Join(got, " ") != "keystore.resync_interval listen acme.email" {
		t.Errorf("missing %q", got)
	}
}

// TestConfigKeysWalk: the walk over a synthetic config.
func TestConfigKeysWalk(t *testing.T) {
	t.Parallel()
	type inner struct {
		Rate  int            `yaml:"rate"`
		Plans map[string]int `yaml:"plans"`
	}
	type embedded struct {
		Extra string `yaml:"extra"`
	}
	type cfg struct {
		Server   inner  `yaml:"server"`
		Ptr      *inner `yaml:"ptr,omitempty"`
		Skip     string `yaml:"-"`
		embedded `yaml:",inline"`
		Rate     gateway.MinBodyRate `yaml:"rate"`
		NoTag    bool
	}
	got := configKeys(reflect.TypeOf(cfg{}), "")
	want := "server.rate server.plans ptr.rate ptr.plans extra rate notag"
	if strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", strings.Join(got, " "), want)
	}
}

// TestAdminAPIReference: every operation of adminapi/openapi.json (its
// method and path, on one line) appears in docs/reference/admin-api.md.
func TestAdminAPIReference(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root, "adminapi/openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Paths) == 0 {
		t.Fatal("adminapi/openapi.json has no paths")
	}
	doc := readDoc(t, "docs/reference/admin-api.md")
	for _, op := range missingOperations(doc, spec.Paths) {
		t.Errorf("docs/reference/admin-api.md lacks %s (a line with both)", op)
	}
}

// missingOperations returns the "METHOD path" of paths that no line of
// doc names: the path whole, and the method as a word.
func missingOperations(doc string, paths map[string]map[string]json.RawMessage) []string {
	var miss []string
	lines := strings.Split(doc, "\n")
	for p, ops := range paths {
		pathRe := regexp.MustCompile(`(^|[^A-Za-z0-9_/{}-])` + regexp.QuoteMeta(p) + `($|[^A-Za-z0-9_/{}-])`)
		for m := range ops {
			switch m {
			case "get", "put", "post", "delete", "patch", "head", "options":
			default:
				continue // parameters, summary
			}
			method := regexp.MustCompile(`\b` + strings.ToUpper(m) + `\b`)
			found := false
			for _, l := range lines {
				if pathRe.MatchString(l) && method.MatchString(l) {
					found = true
					break
				}
			}
			if !found {
				miss = append(miss, strings.ToUpper(m)+" "+p)
			}
		}
	}
	sort.Strings(miss)
	return miss
}

// TestMissingOperations: a prefix of a path is not the path; the method
// must be on the path's line.
func TestMissingOperations(t *testing.T) {
	t.Parallel()
	doc := "| GET | `/v1/keys/{id}` |\n| POST | `/v1/keys` |\nDELETE is below\n`/v1/consumers`\n"
	ops := map[string]map[string]json.RawMessage{
		"/v1/keys":      {"post": nil, "get": nil, "parameters": nil},
		"/v1/keys/{id}": {"get": nil},
		"/v1/consumers": {"delete": nil},
		"/v1/migration": {"get": nil},
	}
	got := missingOperations(doc, ops)
	if want := "DELETE /v1/consumers|GET /v1/keys|GET /v1/migration"; strings.Join(got, "|") != want {
		t.Errorf("missing %q, want %q", got, want)
	}
}

// TestMetricsReference: every metric keygate registers appears in
// docs/reference/metrics.md. The names are the keygate_* string
// literals of the non-test files that import the Prometheus client, which
// is where every collector is made (the Go and process collectors are
// the client's, documented by it).
func TestMetricsReference(t *testing.T) {
	t.Parallel()
	names := metricNames(t)
	for _, must := range []string{"keygate_requests_total", "keygate_refusals_total", "keygate_build_info"} {
		if !names[must] {
			t.Fatalf("the scan did not find %s: it is broken", must)
		}
	}
	doc := readDoc(t, "docs/reference/metrics.md")
	var list []string
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	for _, m := range missingWords(doc, list) {
		t.Errorf("docs/reference/metrics.md lacks the metric %s", m)
	}
}

var metricName = regexp.MustCompile(`^keygate_[a-z0-9_]+$`)

func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	walkFiles(t, ".go", func(rel string) {
		if strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "bench/") {
			return
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		prom := false
		for _, im := range f.Imports {
			if strings.HasPrefix(im.Path.Value, `"github.com/prometheus/client_golang/prometheus`) {
				prom = true
			}
		}
		if !prom {
			return
		}
		f, err = parser.ParseFile(fset, filepath.Join(root, rel), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && metricName.MatchString(v) {
					names[v] = true
				}
			}
			return true
		})
	})
	return names
}

// TestRefusalsReference: every refusal of gateway/refusal.go's table
// appears in docs/reference/refusals.md by its label (the reason of
// keygate_refusals_total).
func TestRefusalsReference(t *testing.T) {
	t.Parallel()
	labels := refusalLabels(t)
	if len(labels) < 10 {
		t.Fatalf("found only %d refusal labels in gateway/refusal.go: %v", len(labels), labels)
	}
	doc := readDoc(t, "docs/reference/refusals.md")
	for _, l := range missingWords(doc, labels) {
		t.Errorf("docs/reference/refusals.md lacks the refusal %s", l)
	}
}

// refusalLabels reads the label of each row of gateway/refusal.go's
// refusals table.
func refusalLabels(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, "gateway/refusal.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var labels []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "refusals" || len(vs.Values) != 1 {
			return true
		}
		table, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		for _, el := range table.Elts {
			row, ok := el.(*ast.KeyValueExpr).Value.(*ast.CompositeLit)
			if !ok {
				continue
			}
			for _, fe := range row.Elts {
				kv := fe.(*ast.KeyValueExpr)
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "label" {
					if lit, ok := kv.Value.(*ast.BasicLit); ok {
						v, _ := strconv.Unquote(lit.Value)
						if !seen[v] {
							seen[v] = true
							labels = append(labels, v)
						}
					}
				}
			}
		}
		return false
	})
	return labels
}

// walkFiles calls fn with the module-relative path of every file ending
// in ext, outside hidden directories, testdata and node_modules.
func walkFiles(t *testing.T, ext string, fn func(rel string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if n := d.Name(); rel != "." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ext) {
			fn(rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docFiles are the markdown files the doc checks cover: all but the
// notes waiting in docs/_incoming.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	walkFiles(t, ".md", func(rel string) {
		if !strings.HasPrefix(rel, "docs/_incoming/") {
			files = append(files, rel)
		}
	})
	return files
}

// commits is the set of every commit hash of the repository (nil outside
// one).
func commits(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "rev-list", "--all").Output()
	if err != nil {
		t.Logf("git rev-list --all: %v: commit hashes are found by the words beside them only", err)
		return nil
	}
	set := map[string]bool{}
	for _, h := range strings.Fields(string(out)) {
		set[h] = true
	}
	return set
}

var (
	utcTime    = regexp.MustCompile(`\b\d\d:\d\d(:\d\d)?( ?UTC|Z)\b`)
	isoDate    = regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b`)
	hexWord    = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	commitWord = regexp.MustCompile(`(?i)\b(commit|build|built at|revision|rev)\b[^0-9a-f\n]{0,12}\b([0-9a-f]{7,40})\b`)
	// releaseLine is a Keep a Changelog release heading: its date is the
	// release's, not a run's.
	releaseLine = regexp.MustCompile(`^## \[[^\]]+\] - 20\d\d-\d\d-\d\d$`)
)

// datedFigures returns "LINE: what" for each line of a markdown file
// that carries a UTC time, a date or a commit hash. known holds the
// repository's commits; a hex word is a hash when it starts one, or when a
// word like "commit" or "build" comes just before it.
func datedFigures(doc string, known map[string]bool) []string {
	var found []string
	inFence := false
	for i, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if releaseLine.MatchString(l) {
			continue
		}
		var what []string
		// A date or time in code is an example's value (--expires,
		// "until"), not when something ran.
		prose := l
		if inFence || strings.HasPrefix(strings.TrimSpace(l), "```") {
			prose = ""
		}
		prose = inlineCode.ReplaceAllString(prose, "")
		if m := utcTime.FindString(prose); m != "" {
			what = append(what, "the time "+m)
		}
		if m := isoDate.FindString(prose); m != "" {
			what = append(what, "the date "+m)
		}
		for _, h := range hexWord.FindAllString(l, -1) {
			if strings.ContainsAny(h, "abcdef") && strings.ContainsAny(h, "0123456789") && startsCommit(h, known) {
				what = append(what, "the commit "+h)
			}
		}
		if m := commitWord.FindStringSubmatch(l); m != nil && strings.ContainsAny(m[2], "0123456789") {
			what = append(what, "the commit "+m[2])
		}
		if len(what) > 0 {
			found = append(found, fmt.Sprintf("%d: %s", i+1, strings.Join(dedupe(what), ", ")))
		}
	}
	return found
}

func startsCommit(h string, known map[string]bool) bool {
	if known[h] {
		return true
	}
	for c := range known {
		if strings.HasPrefix(c, h) {
			return true
		}
	}
	return false
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// TestDatedFigures: the dated figures of a synthetic page are found, and
// what is not one is left alone.
func TestDatedFigures(t *testing.T) {
	t.Parallel()
	known := map[string]bool{"7e11da8f00c0ffee7e11da8f00c0ffee7e11da8f": true}
	for _, tc := range []struct {
		name, line string
		found      bool
	}{
		{"a UTC time", "Run ended 14:02 UTC, on 2 cores.", true},
		{"a Z time", "at 2026-11-27T14:02:11Z", true},
		{"a run date", "On 2026-11-27 keygate did 1.06x.", true},
		{"a real commit, short", "the request path of 7e11da8", true},
		{"a real commit, long", "7e11da8f00c0ffee7e11da8f00c0ffee7e11da8f", true},
		{"a hash after build", "build 0badc0de1 measured", true},
		{"a hash after commit", "at commit `abc1234`", true},
		{"a release heading", "## [0.1.0] - 2026-11-29", false},
		{"an example's expiry in code", "(`--until 2026-12-31T00:00:00Z`): a temporary grant", false},
		{"a run date beside code", "(`make bench-peers`; 2026-11-28): with", true},
		{"a duration", "ratelimit.lease: 20ms, per 1s; quota per 24h", false},
		{"a hex-looking word", "the deadbeef marker, and decade", false},
		{"a clock in a config", "window: 10:30", false},
		{"a key prefix", "kg_live_3f9a2b7c…", false},
		{"a SHA-256 digest", "sha256:" + strings.Repeat("ab12", 16), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := datedFigures(tc.line, known)
			if (len(got) > 0) != tc.found {
				t.Errorf("%q: found %q, want found=%v", tc.line, got, tc.found)
			}
		})
	}
}

// TestNoDatedFiguresInDocs: no markdown file outside bench/results (and
// the notes in docs/_incoming) carries a UTC time, a date or a commit
// hash, except one header line of docs/performance.md that names its
// build and date, and CHANGELOG.md's release headings.
func TestNoDatedFiguresInDocs(t *testing.T) {
	t.Parallel()
	known := commits(t)
	for _, rel := range docFiles(t) {
		if strings.HasPrefix(rel, "bench/results/") || rel == "LICENSE.md" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		found := datedFigures(string(b), known)
		if rel == "docs/performance.md" && len(found) == 1 {
			continue // its one header
		}
		for _, f := range found {
			t.Errorf("%s:%s: dated runs belong in bench/results/ (make bench-peers BENCH_PEERS_FLAGS=\"-out TOPIC\")", rel, f)
		}
	}
}

// dateInComment is a date in a Go comment; 2006-01-02 is Go's layout.
var dateInComment = regexp.MustCompile(`\b(20\d\d-[01]\d-[0-3]\d)\b`)

// TestNoDatedCommentsInCode: no non-test Go comment carries a date: a
// comment gives the reason and names the benchmark, and the dated run
// lives in bench/results.
func TestNoDatedCommentsInCode(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	walkFiles(t, ".go", func(rel string) {
		if strings.HasSuffix(rel, "_test.go") {
			return
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range datedComments(fset, f) {
			t.Errorf("%s:%s", rel, msg)
		}
	})
}

func datedComments(fset *token.FileSet, f *ast.File) []string {
	var msgs []string
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			for _, m := range dateInComment.FindAllString(c.Text, -1) {
				if m == "2006-01-02" {
					continue
				}
				msgs = append(msgs, fmt.Sprintf("%d: a comment dated %s: give the reason and the benchmark's name; the dated run belongs in bench/results/", fset.Position(c.Pos()).Line, m))
			}
		}
	}
	return msgs
}

// TestDatedComments: over a synthetic file.
func TestDatedComments(t *testing.T) {
	t.Parallel()
	src := `package x

// layout is 2006-01-02T15:04:05Z, Go's reference time.
const layout = "2006-01-02"

// Above this it took 2 GiB (2026-11-27).
const max = 10

var day = "2026-11-27" // a string in code is not a comment
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	got := datedComments(fset, f)
	if len(got) != 1 || !strings.HasPrefix(got[0], "6: a comment dated 2026-11-27") {
		t.Errorf("got %q", got)
	}
}

// A markdown link: [text](target) or ![alt](target), and a reference
// definition: [label]: target.
var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)`)
	inlineCode = regexp.MustCompile("`+[^`]*`+")
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// links returns each link target of a markdown page with its line,
// leaving out code blocks and inline code.
func links(doc string) []struct {
	line   int
	target string
} {
	var out []struct {
		line   int
		target string
	}
	inFence := false
	for i, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") || strings.HasPrefix(strings.TrimSpace(l), "~~~") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		l = inlineCode.ReplaceAllString(l, "")
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out = append(out, struct {
				line   int
				target string
			}{i + 1, m[1]})
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			out = append(out, struct {
				line   int
				target string
			}{i + 1, m[1]})
		}
	}
	return out
}

// anchors is the set of a page's anchors: GitHub's slug of each heading
// (a second of the same slug gets "-1", and so on) and HTML anchors.
func anchors(doc string) map[string]bool {
	set := map[string]bool{}
	count := map[string]int{}
	inFence := false
	for _, l := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			set[m[1]] = true
		}
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if len(l)-len(h) > 6 || (h != "" && h[0] != ' ') {
			continue
		}
		s := slug(h)
		if n := count[s]; n > 0 {
			set[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			set[s] = true
		}
		count[s]++
	}
	return set
}

// slug is GitHub's anchor for a heading's text: lower case, markup and
// punctuation dropped (not - or _), each space a hyphen.
func slug(heading string) string {
	h := strings.TrimSpace(heading)
	h = strings.TrimRight(h, "#")
	h = strings.TrimSpace(h)
	// Links keep their text.
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	h = regexp.MustCompile(`<[^>]+>`).ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case unicode.IsLetter(r), unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug: GitHub's anchors for headings like the docs'.
func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Keys at scale":                      "keys-at-scale",
		" The `keys migrate` command":        "the-keys-migrate-command",
		"Redis: Sentinel, Cluster & outages": "redis-sentinel-cluster--outages",
		"What keygate is (and is not)":       "what-keygate-is-and-is-not",
		"snake_case and 1.0 numbers":         "snake_case-and-10-numbers",
		"[Admin API](admin-api.md) paths":    "admin-api-paths",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := anchors("# A\n## A\n```sh\n# not a heading\n```\n<a id=\"custom\"></a>\n#hashtag\n")
	for _, want := range []string{"a", "a-1", "custom"} {
		if !a[want] {
			t.Errorf("anchors lack %q: %v", want, a)
		}
	}
	if a["not-a-heading"] || a["hashtag"] {
		t.Errorf("anchors from a code block or a non-heading: %v", a)
	}
}

// checkLinks returns "LINE: why" for each relative link of the page at
// rel (read by read) that does not resolve: its file missing, or its
// #anchor not a heading of the target.
func checkLinks(rel string, read func(rel string) (string, error)) []string {
	doc, err := read(rel)
	if err != nil {
		return []string{"0: " + err.Error()}
	}
	var bad []string
	for _, l := range links(doc) {
		target := l.target
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		dest := rel
		if file != "" {
			if strings.HasPrefix(file, "/") {
				dest = path.Clean(strings.TrimPrefix(file, "/"))
			} else {
				dest = path.Join(path.Dir(rel), file)
			}
		}
		d, err := read(dest)
		if err != nil {
			if _, serr := os.Stat(filepath.Join(root, dest)); serr == nil && anchor == "" {
				continue // a directory or a non-text file
			}
			bad = append(bad, fmt.Sprintf("%d: %s: %s does not exist", l.line, target, dest))
			continue
		}
		if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(d)[anchor] {
			bad = append(bad, fmt.Sprintf("%d: %s: %s has no heading with the anchor #%s", l.line, target, dest, anchor))
		}
	}
	return bad
}

// TestCheckLinks: over synthetic pages.
func TestCheckLinks(t *testing.T) {
	t.Parallel()
	pages := map[string]string{
		"README.md": "See [keys](docs/guides/keys.md#issuing-a-key), [gone](docs/gone.md),\n" +
			"[bad anchor](docs/guides/keys.md#nope), [site](https://example.com), `[code](x.md)`\n" +
			"```\n[fenced](nothere.md)\n```\n[ref]: docs/guides/keys.md#plans\n[self](#top)",
		"docs/guides/keys.md": "# Keys\n## Issuing a key\n## Plans\n[up](../../README.md#top)\n[up2](../../README.md#nothing)",
	}
	pages["README.md"] += "\n# Top"
	read := func(rel string) (string, error) {
		if s, ok := pages[rel]; ok {
			return s, nil
		}
		return "", fmt.Errorf("%s: no such file", rel)
	}
	got := strings.Join(append(checkLinks("README.md", read), checkLinks("docs/guides/keys.md", read)...), "\n")
	want := "1: docs/gone.md: docs/gone.md does not exist\n" +
		"2: docs/guides/keys.md#nope: docs/guides/keys.md has no heading with the anchor #nope\n" +
		"5: ../../README.md#nothing: README.md has no heading with the anchor #nothing"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestLinks: every relative link and anchor of every markdown file
// resolves.
func TestLinks(t *testing.T) {
	t.Parallel()
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err == nil {
			if fi, serr := os.Stat(filepath.Join(root, rel)); serr == nil && fi.IsDir() {
				return "", fmt.Errorf("%s is a directory", rel)
			}
		}
		return string(b), err
	}
	for _, rel := range docFiles(t) {
		for _, b := range checkLinks(rel, read) {
			t.Errorf("%s:%s", rel, b)
		}
	}
}

// citation is a Go comment's pointer into the docs: a markdown file
// (README alone is README.md), then a comma and a heading's text, bare up
// to ")" or "." or quoted, or "#" and an anchor; TestCitations shows each
// form. A foreign project's README (after "certmagic's") is not one.
var citation = regexp.MustCompile(`(?:^|[\s(])((?:[\w-]+/)*(?:README(?:\.md)?|[\w-]+\.md))(?:#([\w-]+)|,\s*(?:"([^"]+)"|([A-Z][\w .'-]*?)\s*[).;:]))`)

// citations returns the (file, section, line) of each citation of a
// comment text; section is a heading's text or, after "#", an anchor.
func citations(text string) [][3]string {
	var out [][3]string
	// A comment's lines are one text.
	joined := regexp.MustCompile(`\n\s*//\s?`).ReplaceAllString(text, " ")
	joined = strings.TrimPrefix(joined, "//")
	for _, m := range citation.FindAllStringSubmatchIndex(joined, -1) {
		before := joined[:m[2]]
		if regexp.MustCompile(`[\w-]+'s\s*$`).MatchString(before) {
			continue // another project's README
		}
		file := joined[m[2]:m[3]]
		var anchor, heading string
		if m[4] >= 0 {
			anchor = joined[m[4]:m[5]]
		}
		if m[6] >= 0 {
			heading = joined[m[6]:m[7]]
		}
		if m[8] >= 0 {
			heading = joined[m[8]:m[9]]
		}
		out = append(out, [3]string{file, anchor, heading})
	}
	return out
}

// TestCitations: over synthetic comments.
func TestCitations(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"// the memory budget of README.md, Keys at scale).":                "README.md||Keys at scale",
		"// it was killed (README, Memory limit). With":                     "README||Memory limit",
		"// trying (see deploy/README.md, \"The image\"):":                  "deploy/README.md||The image",
		"// see docs/guides/keys.md#plans for the plans":                    "docs/guides/keys.md|plans|",
		"// (see certmagic's\n// README, \"Behind a load balancer\").":      "",
		"// See README.md; `keygate help` lists the commands.":              "",
		"// one table (docs/reference/refusals.md, Refusals).":              "docs/reference/refusals.md||Refusals",
		"// as the README\n// suggests turning them on.":                    "",
		"// the README's examples (`\"plan\":\"pro\"`, `--plan team`) work": "",
	} {
		var got []string
		for _, c := range citations(text) {
			got = append(got, strings.Join(c[:], "|"))
		}
		if strings.Join(got, ";") != want {
			t.Errorf("%q: got %q, want %q", text, got, want)
		}
	}
}

// TestCodeCitations: every citation of a doc section in a Go comment
// names a file that exists and a heading (or anchor) it has. "README"
// alone is README.md.
func TestCodeCitations(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	walkFiles(t, ".go", func(rel string) {
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, cg := range f.Comments {
			for _, c := range citations(commentText(cg)) {
				file, anchor, heading := c[0], c[1], c[2]
				if file == "README" {
					file = "README.md"
				}
				target := file
				if !strings.Contains(file, "/") && file != "README.md" {
					target = path.Join(path.Dir(rel), file)
				}
				b, err := os.ReadFile(filepath.Join(root, target))
				line := fset.Position(cg.Pos()).Line
				if err != nil {
					t.Errorf("%s:%d: cites %s, which does not exist", rel, line, file)
					continue
				}
				a := anchors(string(b))
				switch {
				case anchor != "" && !a[anchor]:
					t.Errorf("%s:%d: cites %s#%s, which has no such anchor", rel, line, file, anchor)
				case heading != "" && !a[slug(heading)]:
					t.Errorf("%s:%d: cites %s, %q, which has no such heading", rel, line, file, heading)
				}
			}
		}
	})
}

// commentText is a comment group's text as written, "//" included, so
// that citations see its lines joined.
func commentText(cg *ast.CommentGroup) string {
	var lines []string
	for _, c := range cg.List {
		lines = append(lines, c.Text)
	}
	return strings.Join(lines, "\n")
}
