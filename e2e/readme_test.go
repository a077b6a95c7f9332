package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// The shell examples of README.md and of every page under docs/ (not
// docs/_incoming, notes waiting to be folded in) are tested: every ```sh
// block carries a marker on the line before it,
//
//	<!-- readme-test: run -->             run against `make run`'s setup
//	<!-- readme-test: skip: REASON -->     not runnable here, and why
//
// and a block without one fails the test. A run block is cut into steps
// at its "# => " lines, which show what the step gives:
//
//	# => 201                         every curl of the step answered 201
//	# => 201 {"id":"con_…",…}        and the step printed that ("…": anything)
//	# => key_…                       a step without curl printed that
//	# => exit 1                      the step's last command exited 1
//
// A curl call in a step without "# => STATUS" fails the test, so every
// example's status is shown and asserted. Each block runs in bash (set -euo
// pipefail) in the directory of a real `keygate demo` (what `make run`
// runs) on free loopback ports, after the line the demo's banner tells
// the reader to paste (TOKEN=… API=…), with the keygate binary on PATH
// and the demo's config as keygate.yaml: its ports, and the plans the demo
// adds (pro, team) written out, since the CLI examples read the file.
// TestMakeRunDemo checks that `make run` itself has them. Each file's run
// blocks share one demo of their own, in order.
//
// Every ```yaml block carries a marker too:
//
//	<!-- config-test: parse -->          a keygate config: config.Parse loads it
//	<!-- config-test: skip: REASON -->   not a whole config (a fragment, a
//	                                     Helm values file), and why

// readmeMarker is the marker line before a ```sh block.
var readmeMarker = regexp.MustCompile(`^<!-- readme-test: (run|skip: (.+)) -->$`)

// configMarker is the marker line before a ```yaml block.
var configMarker = regexp.MustCompile(`^<!-- config-test: (parse|skip: (.+)) -->$`)

// readmeBlock is one ```sh (or ```yaml) block of a markdown file.
type readmeBlock struct {
	file string // module-relative, for file:line in errors
	line int    // of the opening fence
	run  bool
	skip string
	body []string
	// bodyLine is the file's line of body[0].
	bodyLine int
}

// readmeBlocks returns the ```sh blocks and the errors of unmarked ones.
func readmeBlocks(file, readme string) ([]readmeBlock, []string) {
	blocks, _, bad := docBlocks(file, readme)
	return blocks, bad
}

// docBlocks returns a markdown file's shell blocks, its yaml blocks (run:
// marked parse) and the errors of unmarked ones.
func docBlocks(file, readme string) ([]readmeBlock, []readmeBlock, []string) {
	lines := strings.Split(readme, "\n")
	var blocks, yamls []readmeBlock
	var bad []string
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimPrefix(fence, "```")
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if lang == "yaml" || lang == "yml" {
			b := readmeBlock{file: file, line: i + 1, body: lines[i+1 : end], bodyLine: i + 2}
			m := []string(nil)
			if i > 0 {
				m = configMarker.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
			}
			switch {
			case m == nil:
				bad = append(bad, fmt.Sprintf("%s:%d: a yaml block without a marker (<!-- config-test: parse --> or <!-- config-test: skip: REASON -->)", file, i+1))
			case m[1] == "parse":
				b.run = true
			default:
				b.skip = m[2]
			}
			yamls = append(yamls, b)
		}
		if lang == "sh" || lang == "bash" || lang == "shell" || lang == "console" {
			b := readmeBlock{file: file, line: i + 1, body: lines[i+1 : end], bodyLine: i + 2}
			m := []string(nil)
			if i > 0 {
				m = readmeMarker.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
			}
			switch {
			case m == nil:
				bad = append(bad, fmt.Sprintf("%s:%d: a shell block without a marker (<!-- readme-test: run --> or <!-- readme-test: skip: REASON -->)", file, i+1))
			case m[1] == "run":
				b.run = true
			default:
				b.skip = m[2]
			}
			blocks = append(blocks, b)
		}
		i = end
	}
	return blocks, yamls, bad
}

// readmeStep is a part of a block up to a "# => " line.
type readmeStep struct {
	line   int // README line of the "# => " line, or of the block's end
	script string
	status string // "" when none is shown
	output string // pattern; "" when none is shown
	// exit is the exit status shown ("# => exit 1"); -1 when none is.
	exit  int
	shown bool
}

var stepExpect = regexp.MustCompile(`^# => ?(.*)$`)
var statusFirst = regexp.MustCompile(`^([1-5][0-9][0-9])(?:\s+(.*))?$`)
var exitShown = regexp.MustCompile(`^exit ([0-9]+)$`)

func readmeSteps(b readmeBlock) []readmeStep {
	var steps []readmeStep
	var cur []string
	for i, l := range b.body {
		m := stepExpect.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			cur = append(cur, l)
			continue
		}
		s := readmeStep{line: b.bodyLine + i, script: strings.Join(cur, "\n"), shown: true, exit: -1}
		if em := exitShown.FindStringSubmatch(m[1]); em != nil {
			s.exit, _ = strconv.Atoi(em[1])
		} else if sm := statusFirst.FindStringSubmatch(m[1]); sm != nil {
			s.status, s.output = sm[1], sm[2]
		} else {
			s.output = m[1]
		}
		steps = append(steps, s)
		cur = nil
	}
	if strings.TrimSpace(strings.Join(cur, "\n")) != "" {
		steps = append(steps, readmeStep{line: b.bodyLine + len(b.body), script: strings.Join(cur, "\n"), exit: -1})
	}
	return steps
}

// outputPattern turns a shown output into a regexp: "…" is any text.
func outputPattern(shown string) *regexp.Regexp {
	parts := strings.Split(strings.TrimSpace(shown), "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)^` + strings.Join(parts, ".*") + `$`)
}

// docFiles are README.md and every page under docs/ but docs/_incoming,
// module-relative.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("../docs", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "_incoming" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel("..", p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

func readDocFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeShellBlocksAreMarked: every shell block of README.md and the
// docs says whether the test runs it, every yaml block whether it is a
// config to parse; the steps' shown results parse.
func TestReadmeShellBlocksAreMarked(t *testing.T) {
	t.Parallel()
	for _, file := range docFiles(t) {
		blocks, _, bad := docBlocks(file, readDocFile(t, file))
		for _, b := range bad {
			t.Error(b)
		}
		runs := 0
		for _, b := range blocks {
			if b.run {
				runs++
			}
		}
		if file == "README.md" && runs == 0 {
			t.Error("README.md marks no shell block to run")
		}
	}
}

// TestDocBlocksMarked: the markers over a synthetic page: an unmarked
// block of either kind is reported as file:line.
func TestDocBlocksMarked(t *testing.T) {
	t.Parallel()
	page := "# Page\n<!-- readme-test: run -->\n```sh\nkeygate version\n```\n```bash\nls\n```\n" +
		"<!-- config-test: parse -->\n```yaml\nserver: {}\n```\n<!-- config-test: skip: a fragment -->\n```yaml\nx: 1\n```\n```yaml\ny: 2\n```\n"
	sh, yamls, bad := docBlocks("docs/x.md", page)
	want := "docs/x.md:6: a shell block without a marker (<!-- readme-test: run --> or <!-- readme-test: skip: REASON -->)\n" +
		"docs/x.md:17: a yaml block without a marker (<!-- config-test: parse --> or <!-- config-test: skip: REASON -->)"
	if got := strings.Join(bad, "\n"); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if len(sh) != 2 || !sh[0].run || sh[0].line != 3 || len(yamls) != 3 || !yamls[0].run || yamls[1].skip != "a fragment" {
		t.Errorf("blocks %+v, yaml %+v", sh, yamls)
	}
}

// TestDocConfigBlocks: every yaml block marked parse, in README.md and
// the docs, loads with keygate's config loader.
func TestDocConfigBlocks(t *testing.T) {
	t.Parallel()
	for _, file := range docFiles(t) {
		_, yamls, _ := docBlocks(file, readDocFile(t, file))
		for _, b := range yamls {
			if !b.run {
				continue
			}
			if _, err := config.Parse([]byte(strings.Join(b.body, "\n") + "\n")); err != nil {
				t.Errorf("%s:%d: the config does not load: %v", b.file, b.line, err)
			}
		}
	}
}

// TestReadmeExamples runs the runnable shell blocks of README.md and
// each page of the docs against a real `keygate demo`, one for each
// file, and asserts each step's shown status and output.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	for _, file := range docFiles(t) {
		doc := readDocFile(t, file)
		blocks, bad := readmeBlocks(file, doc)
		if len(bad) > 0 {
			t.Error(strings.Join(bad, "\n"))
			continue
		}
		runs := false
		for _, b := range blocks {
			runs = runs || b.run
		}
		if !runs {
			continue
		}
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			demo := startReadmeDemo(t, []byte(doc))
			for _, b := range blocks {
				t.Run(fmt.Sprintf("%s:%d", file, b.line), func(t *testing.T) {
					if !b.run {
						t.Skip("marked not runnable here: " + b.skip)
					}
					runReadmeBlock(t, demo, b)
				})
			}
		})
	}
}

// readmeDemo is a running `keygate demo` and what its banner says.
type readmeDemo struct {
	dir   string
	paste string // the banner's TOKEN=… API=… line
	logs  *testkit.SyncBuffer
}

func startReadmeDemo(t *testing.T, readme []byte) *readmeDemo {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), readme, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`server:
  listen: %q
  admin_listen: %q
upstreams:
  extraction: { targets: ["http://%s"] }
  registry: { targets: ["http://%s"] }
portal:
  listen: %q
admin_api:
  listen: %q
ratelimit:
  plans: # the plans the demo adds, written out for the CLI examples
    pro:  { rate: 200, per: 1s, burst: 400, quota: { requests: 50000, per: 24h } }
    team: { rate: 50, per: 1s, burst: 100, quota: { requests: 100000, per: 24h }, scope: consumer }
`, testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t))
	if err := os.WriteFile(filepath.Join(dir, "keygate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "demo", "--config", "keygate.yaml")
	cmd.Dir = dir
	stdout, _ := cmd.StdoutPipe()
	d := &readmeDemo{dir: dir, logs: &testkit.SyncBuffer{}}
	cmd.Stderr = d.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("demo logs:\n%s", tail(d.logs.String(), 3000))
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "TOKEN=kga_") && strings.Contains(l, " API=") {
				found <- l
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case d.paste = <-found:
	case <-time.After(30 * time.Second):
		t.Fatal("the demo printed no TOKEN=… API=… line within 30s")
	}
	api := d.paste[strings.Index(d.paste, " API=")+5:]
	eventually(t, testkit.HangCheck, func() string {
		out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", api+"/v1/openapi.json").Output()
		if string(out) != "401" {
			return fmt.Sprintf("the admin API is not up: %s %v", out, err)
		}
		return ""
	})
	return d
}

func runReadmeBlock(t *testing.T, d *readmeDemo, b readmeBlock) {
	steps := readmeSteps(b)
	var sc strings.Builder
	sc.WriteString("set -euo pipefail\n")
	// The status of every curl call goes to stderr, marked.
	sc.WriteString(`curl() { command curl -w '%{stderr}@@status %{http_code}\n' "$@"; }` + "\n")
	sc.WriteString(d.paste + "\n")
	for i, s := range steps {
		fmt.Fprintf(&sc, "echo '@@step %d'; echo '@@step %d' >&2\n", i, i)
		if s.exit >= 0 { // a step that shows its failure
			fmt.Fprintf(&sc, "set +e\n%s\n__rc=$?\nset -e\necho \"@@rc $__rc\" >&2\n", s.script)
		} else {
			sc.WriteString(s.script + "\n")
		}
	}
	fmt.Fprintf(&sc, "echo '@@step %d'; echo '@@step %d' >&2\n", len(steps), len(steps))
	cmd := exec.Command("bash", "-c", sc.String())
	cmd.Dir = d.dir
	// COLUMNS unset: the CLI's tables print whole cells into the pipe,
	// whatever the shell running the tests exports.
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"), "COLUMNS=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	outs, errs := splitSteps(stdout.String()), splitSteps(stderr.String())
	if err != nil {
		n := len(outs) - 1 // the step that was running
		line := b.line
		if n >= 0 && n < len(steps) {
			line = steps[n].line
		}
		t.Fatalf("%s:%d: the step failed (%v)\nstdout:\n%s\nstderr:\n%s", b.file, line, err, tail(stdout.String(), 2000), tail(stderr.String(), 2000))
	}
	for i, s := range steps {
		out := strings.TrimSpace(outs[i+1])
		var statuses []string
		rc := ""
		for _, l := range strings.Split(errs[i+1], "\n") {
			if st, ok := strings.CutPrefix(l, "@@status "); ok {
				statuses = append(statuses, st)
			}
			if r, ok := strings.CutPrefix(l, "@@rc "); ok {
				rc = r
			}
		}
		if s.exit >= 0 && rc != strconv.Itoa(s.exit) {
			t.Errorf("%s:%d: shows exit %d, got %q (stderr %s)", b.file, s.line, s.exit, rc, tail(errs[i+1], 500))
		}
		switch {
		case s.status == "" && len(statuses) > 0:
			t.Errorf("%s:%d: a step with curl shows no status (add \"# => STATUS\" after it); it got %v", b.file, s.line, statuses)
		case s.status != "":
			if len(statuses) == 0 {
				t.Errorf("%s:%d: shows status %s, but the step made no HTTP request", b.file, s.line, s.status)
			}
			for _, st := range statuses {
				if st != s.status {
					t.Errorf("%s:%d: shows %s, got %s (output %s)", b.file, s.line, s.status, st, tail(out, 500))
				}
			}
		}
		if s.output != "" && !outputPattern(s.output).MatchString(out) {
			t.Errorf("%s:%d: shows\n  %s\ngot\n  %s", b.file, s.line, s.output, tail(out, 1000))
		}
	}
}

// splitSteps cuts a stream at its "@@step N" lines: part i is what came
// before "@@step i" (after the previous marker).
func splitSteps(s string) map[int]string {
	parts := map[int]string{}
	var cur strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(l), "@@step "); ok {
			if i, err := strconv.Atoi(n); err == nil {
				parts[i] = cur.String()
				cur.Reset()
				continue
			}
		}
		cur.WriteString(l)
	}
	return parts
}
