package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/keygate/keygate/cli"
)

// TestReleaseAndLicense: the chart, its default image and the Dockerfile
// name the release this tree is (cli.Release, what `keygate version`
// prints) and the repository's licence, Apache-2.0, so that an operator
// who deploys the chart runs the version the changelog describes.
func TestReleaseAndLicense(t *testing.T) {
	t.Parallel()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.AppVersion != cli.Release {
		t.Errorf("Chart.yaml appVersion %q, want cli.Release %q", ch.Metadata.AppVersion, cli.Release)
	}
	if got := ch.Metadata.Annotations["artifacthub.io/license"]; got != "Apache-2.0" {
		t.Errorf("Chart.yaml annotation artifacthub.io/license %q, want Apache-2.0", got)
	}
	r := renderChart(t)
	if img := r.deployment.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+cli.Release) {
		t.Errorf("the chart's default image %q, want the tag %s", img, cli.Release)
	}

	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^ARG VERSION=(.*)$`).FindAllStringSubmatch(string(df), -1) {
		if m[1] != cli.Release {
			t.Errorf("Dockerfile ARG VERSION=%s, want cli.Release %s", m[1], cli.Release)
		}
	}
	if !regexp.MustCompile(`(?m)^ARG LICENSES=Apache-2\.0$`).Match(df) {
		t.Error("Dockerfile: no ARG LICENSES=Apache-2.0 for the licenses label")
	}

	lic, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(string(lic), want) {
			t.Errorf("LICENSE lacks %q: not the Apache License 2.0", want)
		}
	}
}
