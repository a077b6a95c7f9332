package differential

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/formctx"
	"github.com/keygate/keygate/gateway"
	"github.com/keygate/keygate/policy"
	"github.com/keygate/keygate/ratelimit"
)

// boundCtx is the context the test credential is bound to; otherCtx is the
// one an attacker tries to smuggle past keygate.
const (
	boundCtx = "11111111-2222-4333-8444-555555555555"
	otherCtx = "99999999-8888-4777-8666-555555555555"
)

// parsed is what one parser read from a body: its fields in order, or the
// error it refused the body with.
type parsed struct {
	Fields [][]string `json:"fields"`
	Error  string     `json:"error"`
}

// upstreamReport is what the stand-in upstream answers: what it received
// and what each parser read from it.
type upstreamReport struct {
	ContentType []string          `json:"content_type"`
	SHA256      string            `json:"sha256"`
	Trailer     []string          `json:"trailer"`
	Parsers     map[string]parsed `json:"parsers"`
}

// parserServer is one out-of-process parser listening on loopback.
type parserServer struct {
	name string
	cmd  *exec.Cmd
	url  string
}

var (
	startOnce sync.Once
	startErr  error
	servers   []*parserServer
	harness   struct {
		gateway  *httptest.Server
		upstream *httptest.Server
		client   *http.Client
	}
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here starts the real parsers' servers; `make check`
		// is the quick loop, `make test` runs them.
		fmt.Println("differential: skipped in -short mode (make test runs it)")
		os.Exit(0)
	}
	code := m.Run()
	for _, s := range servers {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	if harness.gateway != nil {
		harness.gateway.Close()
		harness.upstream.Close()
	}
	os.Exit(code)
}

// setup starts the parsers, the stand-in upstream and a gateway in front of
// it, once per test process.
func setup(t testing.TB) {
	t.Helper()
	startOnce.Do(func() { startErr = start() })
	if startErr != nil {
		t.Fatalf("differential harness: %v", startErr)
	}
}

func start() error {
	busboyDir, err := filepath.Abs(filepath.Join("parsers", "busboy"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(busboyDir, "node_modules", "busboy")); err != nil {
		return fmt.Errorf("busboy is not installed in %s: run `make deps` (npm ci there): %w", busboyDir, err)
	}
	specs := []struct {
		name string
		argv []string
		dir  string
	}{
		// Debian's python3, where python3-werkzeug is installed, not
		// whatever python3 comes first on PATH.
		{"werkzeug", []string{"/usr/bin/python3", "werkzeug_server.py"}, "parsers"},
		{"busboy", []string{"node", "server.js"}, busboyDir},
	}
	for _, sp := range specs {
		s, err := startParser(sp.name, sp.argv, sp.dir)
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	harness.upstream = httptest.NewServer(http.HandlerFunc(fanOut))
	gw, err := gateway.New(gateway.Config{
		Upstreams: gateway.UpstreamsConfig{
			Extraction: gateway.UpstreamConfig{Targets: []string{harness.upstream.URL}},
			Registry:   gateway.UpstreamConfig{Targets: []string{harness.upstream.URL}},
		},
		MaxBodyBytes: 8 << 20,
		SpoolDir:     os.TempDir(),
		Limits: map[string]policy.Limit{
			"live": {Rate: 1e6, Per: time.Second, Burst: 1e9}, // the largest allowed
			"test": {Rate: 1e6, Per: time.Second, Burst: 1e9},
		},
	}, gateway.Deps{Auth: boundKey{}, Limiter: ratelimit.NewLocal(ratelimit.LocalConfig{})})
	if err != nil {
		return err
	}
	harness.gateway = httptest.NewServer(gw)
	harness.client = &http.Client{Timeout: 10 * time.Second}
	return nil
}

func startParser(name string, argv []string, dir string) (*parserServer, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s parser (%s): %w", name, strings.Join(argv, " "), err)
	}
	portc := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		portc <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case port := <-portc:
		if port == "" {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("the %s parser exited before it listened", name)
		}
		return &parserServer{name: name, cmd: cmd, url: "http://127.0.0.1:" + port + "/"}, nil
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("the %s parser did not listen within 20s", name)
	}
}

// boundKey accepts every request as an extraction key bound to the context
// its x-api-key names ("bound:<context>"), so that each corpus case can
// bring its own.
type boundKey struct{}

func (boundKey) Authenticate(r *http.Request) (auth.Verdict, error) {
	ctx, ok := strings.CutPrefix(r.Header.Get("X-Api-Key"), "bound:")
	if !ok {
		return auth.Refuse(auth.ReasonInvalid, "Unauthorized: API key invalid"), nil
	}
	return auth.Verdict{OK: true, Principal: auth.Principal{
		ID: "key_differential", Products: []string{"extraction"}, Env: "live",
		Context: ctx, Method: auth.MethodAPIKey,
	}}, nil
}

// fanOut is the stand-in upstream: it reads what keygate forwarded and asks
// every parser what it reads there.
func fanOut(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "reading the forwarded body: "+err.Error(), http.StatusBadGateway)
		return
	}
	sum := sha256.Sum256(body)
	rep := upstreamReport{
		ContentType: r.Header.Values("Content-Type"),
		SHA256:      hex.EncodeToString(sum[:]),
		Parsers:     map[string]parsed{},
	}
	for k := range r.Trailer {
		rep.Trailer = append(rep.Trailer, k)
	}
	ct := strings.Join(rep.ContentType, ", ")
	rep.Parsers["go"] = parseGo(ct, body)
	for _, s := range servers {
		p, err := s.parse(ct, body)
		if err != nil {
			http.Error(w, s.name+": "+err.Error(), http.StatusBadGateway)
			return
		}
		rep.Parsers[s.name] = p
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

// parseGo reads a body as a Go upstream would, with ParseMultipartForm.
func parseGo(ct string, body []byte) parsed {
	req, _ := http.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	if err := req.ParseMultipartForm(32 << 20); err != nil {
		return parsed{Error: err.Error()}
	}
	defer req.MultipartForm.RemoveAll()
	var p parsed
	for name, vs := range req.MultipartForm.Value {
		for _, v := range vs {
			p.Fields = append(p.Fields, []string{name, v, "field"})
		}
	}
	for name, fhs := range req.MultipartForm.File {
		for _, fh := range fhs {
			f, err := fh.Open()
			if err != nil {
				return parsed{Error: err.Error()}
			}
			b, err := io.ReadAll(f)
			_ = f.Close()
			if err != nil {
				return parsed{Error: err.Error()}
			}
			p.Fields = append(p.Fields, []string{name, string(b), "file"})
		}
	}
	return p
}

func (s *parserServer) parse(ct string, body []byte) (parsed, error) {
	req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return parsed{}, err
	}
	req.Header.Set("Content-Type", ct)
	resp, err := harness.client.Do(req)
	if err != nil {
		return parsed{}, err
	}
	defer resp.Body.Close()
	var p parsed
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return parsed{}, fmt.Errorf("decoding its answer: %w", err)
	}
	return p, nil
}

// outcome is what happened to one body sent through keygate.
type outcome struct {
	forwarded bool
	status    int
	report    upstreamReport
	errBody   []byte
}

// send posts one body through keygate, with a key bound to bound, to the
// fan-out upstream.
func send(t testing.TB, bound, contentType string, body []byte) outcome {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, harness.gateway.URL+"/sync", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "bound:"+bound)
	if contentType != "" {
		req.Header["Content-Type"] = []string{contentType}
	}
	resp, err := harness.client.Do(req)
	if err != nil {
		t.Fatalf("POST /sync: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	o := outcome{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		o.errBody = b
		return o
	}
	if err := json.Unmarshal(b, &o.report); err != nil {
		t.Fatalf("upstream report: %v: %s", err, b)
	}
	o.forwarded = true
	return o
}

// isContextField reports whether an application could take a field of this
// name for the context: the name matches contextId in any letter case, also
// with a PHP-style array suffix (contextId[] or contextId[x]), which PHP
// reads as $_POST['contextId'].
func isContextField(name string) bool {
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	return strings.EqualFold(name, "contextid")
}

// errDifferential is a parser that reads something other than the bound
// context in a body keygate forwarded.
var errDifferential = errors.New("differential")

// check applies the invariant to one outcome: a forwarded body is the one
// sent, byte for byte, under exactly one Content-Type, with no trailer; and
// each parser refuses it or reads only the bound context. A refused body
// must be refused with a 4xx in the spec's shape, never a 5xx.
func check(bound string, body []byte, o outcome) error {
	if !o.forwarded {
		if o.status >= 500 {
			return fmt.Errorf("keygate answered %d: %s", o.status, o.errBody)
		}
		var e struct {
			StateText string
			TraceId   string
			Messages  []string
		}
		if err := json.Unmarshal(o.errBody, &e); err != nil || e.StateText != "ERROR" || e.TraceId == "" || len(e.Messages) == 0 {
			return fmt.Errorf("refusal %d is not the spec's error body: %s", o.status, o.errBody)
		}
		return nil
	}
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); got != o.report.SHA256 {
		return fmt.Errorf("the upstream received other bytes than the client sent")
	}
	if len(o.report.ContentType) != 1 {
		return fmt.Errorf("the upstream received %d Content-Type headers", len(o.report.ContentType))
	}
	if len(o.report.Trailer) != 0 {
		return fmt.Errorf("the upstream received trailers %v", o.report.Trailer)
	}
	var errs []error
	for name, p := range o.report.Parsers {
		if p.Error != "" {
			continue // refused: nothing to mistake
		}
		for _, f := range p.Fields {
			if isContextField(f[0]) && !formctx.EqualContext(f[1], bound) {
				errs = append(errs, fmt.Errorf("%w: %s reads %s field %q = %q", errDifferential, name, f[2], f[0], f[1]))
			}
		}
	}
	return errors.Join(errs...)
}

// readsBound reports whether every parser read the bound context (used for
// the corpus's well-formed controls, which must pass).
func readsBound(o outcome) error {
	for name, p := range o.report.Parsers {
		if p.Error != "" {
			return fmt.Errorf("%s refused a well-formed body: %s", name, p.Error)
		}
		found := false
		for _, f := range p.Fields {
			if isContextField(f[0]) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%s found no context field in a well-formed body", name)
		}
	}
	return nil
}
