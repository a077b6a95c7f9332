package e2e

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/keygate/keygate/internal/testsupport/oidctest"
	"github.com/keygate/keygate/internal/testsupport/redistest"
	"github.com/keygate/keygate/internal/testsupport/testkit"
)

// metricName finds the metric names a PromQL expression uses: keygate's
// own, all named keygate_*.
var metricName = regexp.MustCompile(`\bkeygate_[a-z0-9_]+\b`)

// namedMetrics returns every metric named by the alert rules and the
// dashboard, each with the first file that names it.
func namedMetrics(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	add := func(file, expr string) {
		for _, n := range metricName.FindAllString(expr, -1) {
			if _, ok := names[n]; !ok {
				names[n] = file
			}
		}
	}
	rules, err := os.ReadFile("../deploy/prometheus/keygate-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Only the expressions: the annotations name metrics too, as advice.
	for _, m := range regexp.MustCompile(`(?ms)^\s+expr: (\|\n(?:\s{10,}.*\n)+|.*\n)`).FindAllStringSubmatch(string(rules), -1) {
		add("keygate-alerts.yaml", m[1])
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	b, err := os.ReadFile("../deploy/grafana/keygate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			add("keygate-dashboard.json ("+p.Title+")", tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		add("keygate-dashboard.json (variables)", v.Definition)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric names in the rules and the dashboard: %v", len(names), names)
	}
	return names
}

// TestDashboardAndRulesNameExportedMetrics runs the real binary with every
// part that registers metrics switched on (Redis keystore and limiter, the
// failure limit, the plain-HTTP listener, the admin API, the portal, the
// token endpoint), sends it the requests that make labelled series appear
// (a forwarded request, an unknown key, one over the limit, the admin API,
// the portal), scrapes /metrics and checks that every metric the alert
// rules and the Grafana dashboard name is exported.
func TestDashboardAndRulesNameExportedMetrics(t *testing.T) {
	rs := redistest.Start(t)
	portalAddr, adminAPIAddr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	portalURL := "https://" + portalAddr
	op := oidctest.Start(t, portalURL+"/callback")
	opCA := filepath.Join(t.TempDir(), "provider.pem")
	if err := os.WriteFile(opCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: op.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KEYGATE_TEST_PORTAL_SECRET", op.ClientSecret)
	g := startGateway(t, gwOpts{
		skipStart:  true,
		serverYAML: fmt.Sprintf("  http_listen: %q\n", httpAddr),
		// The token endpoint, for its cache's metrics.
		authYAML: "auth:\n  failure_limit: { enabled: true, rate: 100000, per: 1s, burst: 100000 }\n" +
			"  token_endpoint: { enabled: true, issuer: \"https://keygate.test\" }\n",
		limitsYAML: "    live: { rate: 1000, per: 1s, burst: 1000 }\n    test: { rate: 1, per: 1h, burst: 1 }",
		extra: fmt.Sprintf(`redis:
  addrs: [%q]
`+slowMachineRedis+`admin_api:
  enabled: true
  listen: %q
portal:
  enabled: true
  listen: %q
  public_url: %q
  oidc:
    issuer: %q
    client_id: %q
    client_secret_env: KEYGATE_TEST_PORTAL_SECRET
    ca_file: %q
`, rs.Addr, adminAPIAddr, portalAddr, portalURL, op.Issuer, op.ClientID, opCA),
	})
	g.rewriteConfig(func(c string) string {
		c = strings.Replace(c, "keystore:\n  backend: file", "keystore:\n  backend: redis", 1)
		return strings.Replace(c, "ratelimit:\n  backend: local", "ratelimit:\n  backend: redis\n"+slowMachineRateLimit, 1)
	})
	g.start()
	key := g.issue("--product", "extraction", "--env", "test", "--context", ctxA)

	for i, want := range []int{200, 429} { // forwarded, then over the test env's limit
		if status, body := g.send(key); status != want {
			t.Fatalf("request %d: %d, want %d: %s", i, status, want, body)
		}
	}
	if status, _ := g.send(key[:len(key)-4] + "AAAA"); status != http.StatusUnauthorized {
		t.Fatalf("unknown key: %d, want 401", status)
	}
	for _, u := range []string{"https://" + adminAPIAddr + "/v1/keys", portalURL + "/"} {
		resp, err := g.Client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	resp, err := http.Get(g.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	exported := func(name string) bool {
		if f, ok := families[name]; ok && len(f.Metric) > 0 {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if f, ok := families[base]; ok && len(f.Metric) > 0 && f.GetType() == dto.MetricType_HISTOGRAM {
					return true
				}
			}
		}
		return false
	}
	names := namedMetrics(t)
	var missing []string
	for n, where := range names {
		if !exported(n) {
			missing = append(missing, n+" (named in "+where+")")
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("%d of %d metrics named by the rules and the dashboard are not exported by a running keygate:\n  %s",
			len(missing), len(names), strings.Join(missing, "\n  "))
	}
	// keygate_build_info carries the version and the Go version.
	bi := families["keygate_build_info"]
	if bi == nil || len(bi.Metric) != 1 {
		t.Fatalf("keygate_build_info: %v", bi)
	}
	labels := map[string]string{}
	for _, l := range bi.Metric[0].Label {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] == "" || !strings.HasPrefix(labels["go_version"], "go1.") || bi.Metric[0].GetGauge().GetValue() != 1 {
		t.Errorf("keygate_build_info = %v, %v; want version and go_version labels and the value 1", labels, bi.Metric[0].GetGauge().GetValue())
	}
}
