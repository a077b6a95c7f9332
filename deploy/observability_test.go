package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The operator's kit: the Prometheus alert rules (deploy/prometheus) and
// the Grafana dashboard (deploy/grafana). That every metric they name is
// exported by a running keygate is checked in e2e
// (TestDashboardAndRulesNameExportedMetrics).

const (
	rulesFile     = "prometheus/keygate-alerts.yaml"
	rulesTestFile = "prometheus/keygate-alerts.test.yaml"
	dashboardFile = "grafana/keygate-dashboard.json"
)

// wantAlerts are the alerts an on-call engineer is promised, one per
// condition of the operator's kit.
var wantAlerts = []string{
	"KeygateUpstream5xxRatioHigh",   // upstream 5xx ratio
	"KeygateLatencyP99AboveSLO",     // p99 above an SLO
	"KeygateRateLimiterInFallback",  // limiter in fallback
	"KeygateKeystoreReloadFailing",  // keystore reload failing
	"KeygateUsageDropped",           // usage being dropped
	"KeygateCertificateExpiresSoon", // certificate expiry near
	"KeygateAuthFailureSurge",       // a surge of auth failures
	"KeygateCleartextCredential",    // any cleartext credential
	// Redis failures (issue 48): each has a metric and a warning.
	"KeygateKeystoreDegraded",             // keystore cannot reach Redis, or runs on its last good set
	"KeygateKeystoreDataLoss",             // a store that lost data
	"KeygateKeystoreReinstatementBlocked", // a blocked reinstatement
	"KeygateKeystoreLogGap",               // a lost change-log position
	"KeygateKeystoreWaitTimeouts",         // a write whose WAIT timed out
}

// promtool finds promtool (Debian package prometheus, installed by make
// deps).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: `make deps` installs it (Debian package prometheus)")
	}
	return p
}

func TestAlertRulesPassPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name      string `yaml:"name"`
		AlertRule []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// decodeYAML decodes file into v; strict refuses fields v does not have.
func decodeYAML(t *testing.T, file string, v any, strict bool) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// TestEveryAlertHasARunbookAndBothCases: the rules hold exactly the
// promised alerts, each with a severity, a summary and a runbook, and the
// promtool tests give each one case where it fires and one where it stays
// quiet.
func TestEveryAlertHasARunbookAndBothCases(t *testing.T) {
	t.Parallel()
	var rf ruleFile
	decodeYAML(t, rulesFile, &rf, true)
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, sev)
			}
			if len(r.Annotations["runbook"]) < 40 || r.Annotations["summary"] == "" {
				t.Errorf("%s: needs a summary and a runbook line that says what to do, has %v", r.Alert, r.Annotations)
			}
		}
	}
	got, want := slices.Sorted(slices.Values(alerts)), slices.Sorted(slices.Values(wantAlerts))
	if !slices.Equal(got, want) {
		t.Errorf("alerts %v, want %v", got, want)
	}

	var rt ruleTests
	decodeYAML(t, rulesTestFile, &rt, false) // promtool checks its shape
	if !slices.Equal(rt.RuleFiles, []string{"keygate-alerts.yaml"}) {
		t.Errorf("rule_files %v, want the rules file", rt.RuleFiles)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRule {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range wantAlerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("%s: a case where it fires: %v, one where it stays quiet: %v; want both", a, fires[a], quiet[a])
		}
	}
}

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Panels        []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDashboardHasThePanels: the dashboard is one Grafana JSON model with
// the promised panels, each querying the data source chosen in its
// variable, laid out without overlaps.
func TestDashboardHasThePanels(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 {
		t.Errorf("uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name+":"+v.Type)
	}
	if !slices.Contains(vars, "datasource:datasource") {
		t.Errorf("variables %v: want a datasource variable, so the dashboard imports into any Grafana", vars)
	}
	// Each promised panel, by a word of its title.
	want := map[string][]string{
		"request rate and latency percentiles by route and status": {"Request rate by route and status", "Latency percentiles by route"},
		"refusals by reason":                        {"Refusals by reason"},
		"upstream latency and errors":               {"Upstream latency", "Upstream errors (5xx on proxied routes)"},
		"Redis limiter: breaker, fallback, latency": {"Breaker and fallback", "Decision latency"},
		"keystore reloads and size":                 {"Keystore reloads", "Keystore size"},
		"usage flushes and drops":                   {"Usage flushes and drops"},
		"cleartext credential exposures":            {"Cleartext credential exposures"},
		"the admin API and the portal":              {"Admin API and portal requests", "Admin API and portal errors"},
		"requests in flight (new metric)":           {"Requests in flight by listener"},
		"build info (new metric)":                   {"Build"},
	}
	titles := map[string]bool{}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	used := map[cell]string{}
	for _, p := range d.Panels {
		titles[p.Title] = true
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("%q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := used[cell{x, y}]; ok {
					t.Errorf("%q overlaps %q at (%d,%d)", p.Title, other, x, y)
					goto next
				}
				used[cell{x, y}] = p.Title
			}
		}
	next:
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%q: datasource %v, want ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, "keygate_") || !strings.Contains(tg.Expr, `job=~"$job"`) {
				t.Errorf("%q %s: %q should query a keygate metric of the chosen job", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	for what, ts := range want {
		for _, title := range ts {
			if !titles[title] {
				t.Errorf("no panel %q (%s)", title, what)
			}
		}
	}
}
