package deploy_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/keyops"
)

// The Helm chart (deploy/helm/keygate), rendered as `helm template` does,
// with Helm's own Go packages (loader, chartutil, engine), for the default
// values and for values-redis.yaml.

const chartDir = "helm/keygate"

// serviceMonitor is the Prometheus Operator's ServiceMonitor as far as the
// chart writes it; decoded strictly like the Kubernetes kinds, so a field
// the chart misspells is an error. (The operator's own Go module would
// add its dependency tree to every build for one kind.)
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one chart rendering, decoded.
type rendered struct {
	deployment *appsv1.Deployment
	services   map[string]*corev1.Service
	configMaps map[string]*corev1.ConfigMap
	pdb        *policyv1.PodDisruptionBudget
	hpa        *autoscalingv2.HorizontalPodAutoscaler
	monitor    *serviceMonitor
	keyPurge   *batchv1.CronJob
	kinds      []string
	// text is the stream `helm template` prints.
	text string
}

// renderChart renders the chart with the values files given (relative to
// deploy/; after values.yaml, as helm template -f does) and decodes every
// manifest strictly: an unknown field is an error.
func renderChart(t *testing.T, valuesFiles ...string) rendered {
	t.Helper()
	vals := map[string]any{}
	for _, f := range valuesFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		vals = chartutil.CoalesceTables(v.AsMap(), vals)
	}
	out, err := renderValues(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{configMaps: map[string]*corev1.ConfigMap{}, services: map[string]*corev1.Service{}}
	var text strings.Builder
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range out {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out[name], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			text.WriteString("---\n# Source: " + name + "\n" + strings.TrimSpace(doc) + "\n")
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			r.kinds = append(r.kinds, meta.Kind)
			var obj any
			switch meta.Kind {
			case "Deployment":
				r.deployment = &appsv1.Deployment{}
				obj = r.deployment
			case "Service":
				svc := &corev1.Service{}
				obj = svc
				defer func() { r.services[svc.Name] = svc }()
			case "ConfigMap":
				cm := &corev1.ConfigMap{}
				obj = cm
				defer func() { r.configMaps[cm.Name] = cm }()
			case "PodDisruptionBudget":
				r.pdb = &policyv1.PodDisruptionBudget{}
				obj = r.pdb
			case "HorizontalPodAutoscaler":
				r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				obj = r.hpa
			case "ServiceMonitor":
				r.monitor = &serviceMonitor{}
				obj = r.monitor
			case "CronJob":
				r.keyPurge = &batchv1.CronJob{}
				obj = r.keyPurge
			default:
				t.Fatalf("%s: a %s the test does not know; decode it too", name, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: %s does not decode strictly: %v\n%s", name, meta.Kind, err, doc)
			}
		}
	}
	r.text = text.String()
	return r
}

// renderValues renders the chart's templates with vals over values.yaml,
// as helm template does.
func renderValues(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "keygate", Namespace: "keygate", IsInstall: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Render(ch, rv)
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// portOf is the port number of a listen address (":9090").
func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, _ := strings.Cut(addr, ":")
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return int32(n)
}

func TestHelmChartRenders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		values   []string
		replicas int32 // 0: the HPA decides
		kinds    []string
	}{
		{"default values", nil, 1, []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Service"}},
		{"redis, three replicas", []string{chartDir + "/values-redis.yaml"}, 0, []string{"ConfigMap", "ConfigMap", "CronJob", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service", "Service", "ServiceMonitor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := renderChart(t, tc.values...)
			if got := slices.Sorted(slices.Values(r.kinds)); !slices.Equal(got, tc.kinds) {
				t.Errorf("kinds %v, want %v", got, tc.kinds)
			}
			d := r.deployment
			if d == nil {
				t.Fatal("no Deployment")
			}
			// keygate loads the rendered configuration.
			cm := r.configMaps["keygate"]
			if cm == nil {
				t.Fatalf("no ConfigMap keygate; got %v", r.configMaps)
			}
			cfg, err := config.Parse([]byte(cm.Data["keygate.yaml"]))
			if err != nil {
				t.Fatalf("the rendered keygate.yaml does not load: %v\n%s", err, cm.Data["keygate.yaml"])
			}
			spec := d.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("%d containers", len(spec.Containers))
			}
			c := spec.Containers[0]

			// Replicas: fixed, or the HPA's, with ratelimit.replicas equal.
			switch {
			case tc.replicas > 0:
				if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas || r.hpa != nil {
					t.Errorf("replicas %v, HPA %v; want %d and no HPA", d.Spec.Replicas, r.hpa != nil, tc.replicas)
				}
			default:
				if d.Spec.Replicas != nil || r.hpa == nil || r.hpa.Spec.MinReplicas == nil || *r.hpa.Spec.MinReplicas != 3 ||
					r.hpa.Spec.ScaleTargetRef.Name != d.Name || r.hpa.Spec.ScaleTargetRef.Kind != "Deployment" {
					t.Errorf("replicas %v, HPA %+v; want the HPA (min 3) to own the replica count", d.Spec.Replicas, r.hpa)
				}
				if cfg.RateLimit.Backend != "redis" || cfg.Keystore.Backend != "redis" || cfg.RateLimit.Replicas != 3 {
					t.Errorf("ratelimit %s (replicas %d), keystore %s; want both on Redis, 3 replicas", cfg.RateLimit.Backend, cfg.RateLimit.Replicas, cfg.Keystore.Backend)
				}
			}

			// Security context: non-root, read-only root filesystem, no
			// capabilities, no privilege escalation, seccomp.
			psc, sc := spec.SecurityContext, c.SecurityContext
			if psc == nil || sc == nil {
				t.Fatal("no security context")
			}
			if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
				psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext %+v: want non-root, a non-zero uid, RuntimeDefault seccomp", psc)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
				(sc.Privileged != nil && *sc.Privileged) {
				t.Errorf("container securityContext %+v: want a read-only root, no escalation, ALL capabilities dropped", sc)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the service account token is mounted; keygate never calls the Kubernetes API")
			}

			// Probes on the admin port keygate listens on.
			admin := portOf(t, cfg.Server.AdminListen)
			var adminPort, httpPort int32
			for _, p := range c.Ports {
				switch p.Name {
				case "admin":
					adminPort = p.ContainerPort
				case "http":
					httpPort = p.ContainerPort
				}
			}
			if adminPort != admin || httpPort != portOf(t, cfg.Server.Listen) {
				t.Errorf("container ports http %d, admin %d; keygate listens on %s and %s", httpPort, adminPort, cfg.Server.Listen, cfg.Server.AdminListen)
			}
			for _, p := range []struct {
				name  string
				probe *corev1.Probe
				path  string
			}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"startup", c.StartupProbe, "/readyz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "admin" {
					t.Errorf("%s probe %+v: want GET %s on the admin port", p.name, p.probe, p.path)
				}
			}

			// Shutdown: preStop sleeps, then keygate drains, all within the
			// grace period.
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
				t.Fatalf("no preStop sleep: %+v", c.Lifecycle)
			}
			grace := *spec.TerminationGracePeriodSeconds
			if pre := c.Lifecycle.PreStop.Sleep.Seconds; pre < 1 || pre+int64(cfg.Server.DrainTimeout.Seconds()) >= grace {
				t.Errorf("preStop %ds + drain %s must stay under the grace period %ds", pre, cfg.Server.DrainTimeout, grace)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
			}

			// Secrets by reference: no Secret rendered, every env value
			// from a secretKeyRef, the file keystore from a Secret volume.
			for _, e := range c.Env {
				if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("env %s: want a secretKeyRef, never a value", e.Name)
				}
			}
			if cfg.Redis.PasswordEnv != "" && !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == cfg.Redis.PasswordEnv }) {
				t.Errorf("redis.password_env %s is not filled from a Secret", cfg.Redis.PasswordEnv)
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = m
			}
			if m, ok := mounts[cfg.Server.SpoolDir]; !ok || m.ReadOnly {
				t.Errorf("server.spool_dir %s is not a writable volume (the root filesystem is read-only)", cfg.Server.SpoolDir)
			}
			if cfg.Keystore.Backend == "file" {
				m, ok := mounts[cfg.Keystore.File]
				if !ok || !m.ReadOnly {
					t.Fatalf("keystore.file %s is not mounted read-only", cfg.Keystore.File)
				}
				if d, ok := mounts[filepath.Dir(cfg.Keystore.File)]; !ok || d.ReadOnly {
					t.Errorf("the keystore's directory is not writable: keygate writes the usage file beside it")
				}
				for _, v := range spec.Volumes {
					if v.Name == m.Name && (v.Secret == nil || v.Secret.SecretName == "") {
						t.Errorf("keystore volume %s is not a Secret reference", v.Name)
					}
				}
			}

			// The Service reaches the API port; the ServiceMonitor scrapes
			// the admin port's /metrics.
			svc := r.services["keygate"]
			if svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" {
				t.Fatalf("Service keygate %+v: want the API port only (never the admin port)", svc)
			}
			for _, s := range r.services {
				for k, v := range s.Spec.Selector {
					if d.Spec.Template.Labels[k] != v {
						t.Errorf("Service %s selects %s=%s, which the pods do not carry", s.Name, k, v)
					}
				}
			}
			if r.monitor != nil {
				m := r.services["keygate-metrics"]
				if len(r.monitor.Spec.Endpoints) != 1 || r.monitor.Spec.Endpoints[0].Port != "admin" || r.monitor.Spec.Endpoints[0].Path != "/metrics" ||
					m == nil || len(m.Spec.Ports) != 1 || m.Spec.Ports[0].Name != "admin" {
					t.Errorf("ServiceMonitor endpoints %+v, metrics Service %+v", r.monitor.Spec.Endpoints, m)
				}
				if svc.Labels["app.kubernetes.io/component"] == "metrics" || m.Labels["app.kubernetes.io/component"] != "metrics" {
					t.Error("the ServiceMonitor must select the metrics Service only")
				}
			}
			if r.pdb == nil || (r.pdb.Spec.MinAvailable == nil) == (r.pdb.Spec.MaxUnavailable == nil) {
				t.Errorf("PodDisruptionBudget %+v: want exactly one of minAvailable and maxUnavailable", r.pdb)
			}
			if dash, ok := r.configMaps["keygate-dashboard"]; ok {
				want, _ := os.ReadFile(dashboardFile)
				if dash.Labels["grafana_dashboard"] != "1" || strings.TrimSpace(dash.Data["keygate.json"]) != strings.TrimSpace(string(want)) {
					t.Errorf("dashboard ConfigMap: labels %v, and its JSON must be deploy/grafana's", dash.Labels)
				}
			}
		})
	}
}

// TestHelmDashboardIsDeployGrafanas: the chart carries a copy of the
// dashboard (Helm reads only files inside the chart); it must be the same
// bytes as deploy/grafana/keygate-dashboard.json, the one source.
func TestHelmDashboardIsDeployGrafanas(t *testing.T) {
	t.Parallel()
	a, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "keygate.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("deploy/helm/keygate/dashboards/keygate.json differs from %s: cp %s %s", dashboardFile, "deploy/"+dashboardFile, "deploy/helm/keygate/dashboards/keygate.json")
	}
}

// update rewrites generated files (deploy/kubernetes/manifests.yaml)
// instead of comparing them: go test ./deploy -run TestKustomizeManifestsAreTheChart -update
var update = flag.Bool("update", false, "rewrite deploy/kubernetes/manifests.yaml from the Helm chart")

const manifestsHeader = `# GENERATED from the Helm chart deploy/helm/keygate with
# deploy/helm/keygate/values-redis.yaml and deploy/kubernetes/values.yaml.
# Do not edit: change the chart or those values, then run
#   go test ./deploy -run TestKustomizeManifestsAreTheChart -update
`

// TestKustomizeManifestsAreTheChart: the kustomize manifests are the
// chart rendered, not a second hand-written source.
func TestKustomizeManifestsAreTheChart(t *testing.T) {
	t.Parallel()
	r := renderChart(t, chartDir+"/values-redis.yaml", "kubernetes/values.yaml")
	want := manifestsHeader + r.text
	const file = "kubernetes/manifests.yaml"
	if *update {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not the chart's rendering; regenerate it: go test ./deploy -run TestKustomizeManifestsAreTheChart -update", file)
	}
	if r.hpa != nil || r.monitor != nil || r.deployment == nil || *r.deployment.Spec.Replicas != 3 {
		t.Error("the kustomize manifests are for plain clusters: three fixed replicas, no HPA, no ServiceMonitor")
	}
}

// TestHelmKeyPurge: with the Redis keystore the chart can run `keygate keys
// purge` daily as a CronJob: one run at a time, the replicas' image,
// configuration and Secret references (never a value), as locked down as
// the replicas, with an age the CLI takes. Off by default; with the file
// keystore (a Secret the pods only read) the chart refuses it.
func TestHelmKeyPurge(t *testing.T) {
	t.Parallel()
	if r := renderChart(t); r.keyPurge != nil {
		t.Error("the default values render a key purge CronJob")
	}
	r := renderChart(t, chartDir+"/values-redis.yaml")
	cj := r.keyPurge
	if cj == nil {
		t.Fatal("values-redis.yaml renders no key purge CronJob")
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || cj.Spec.Schedule == "" {
		t.Errorf("schedule %q, concurrency %q; want a schedule and Forbid", cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy)
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	replica := r.deployment.Spec.Template.Spec.Containers[0]
	if c.Image != replica.Image {
		t.Errorf("image %s, the replicas run %s", c.Image, replica.Image)
	}
	args := strings.Join(c.Args, " ")
	if !strings.HasPrefix(args, "keys purge --config /etc/keygate/keygate.yaml --older-than ") {
		t.Errorf("args %q", args)
	}
	if age, ok := keyops.ParseAge(c.Args[len(c.Args)-1]); !ok || age < 24*time.Hour {
		t.Errorf("--older-than %q: not an age the CLI takes, or under a day", c.Args[len(c.Args)-1])
	}
	if !reflect.DeepEqual(c.Env, replica.Env) || len(c.Env) == 0 || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.SecretKeyRef == nil {
		t.Errorf("env %+v, want the replicas' Secret references %+v", c.Env, replica.Env)
	}
	if pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != r.deployment.Spec.Template.Spec.Volumes[0].ConfigMap.Name {
		t.Errorf("volumes %+v, want the replicas' ConfigMap", pod.Volumes)
	}
	if sc := c.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("security context %+v, service account token %v: want the replicas' lockdown", sc, pod.AutomountServiceAccountToken)
	}
	_, err := renderValues(t, map[string]any{"keyPurge": map[string]any{"enabled": true}})
	if err == nil || !strings.Contains(err.Error(), "keyPurge needs config.keystore.backend redis") {
		t.Errorf("a key purge with the file keystore: %v, want the chart to refuse it", err)
	}
}
