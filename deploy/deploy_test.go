// Package deploy_test checks the deployment files in deploy/: every keygate
// configuration they carry loads with keygate's own loader, the Kubernetes
// manifests, the Compose file and the systemd unit agree with the
// configurations they run, and no file holds anything that looks like a
// real API key or password.
package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/config"
)

// configFileName is the name of every standalone keygate configuration in
// deploy/, and the ConfigMap data key that holds one.
const configFileName = "keygate.yaml"

// embeddedConfig is one keygate configuration found in deploy/.
type embeddedConfig struct {
	where string // file, or file#ConfigMap/name[key]
	body  []byte
}

// yamlFiles lists every YAML file under deploy/, as slash paths relative to
// it, except the Helm chart's templates (Go templates until rendered: see
// helm_test.go).
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && filepath.ToSlash(path) == chartDir+"/templates" {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// allFiles lists every regular file under deploy/.
func allFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// decodeAll decodes every document of a YAML stream into generic nodes.
func decodeAll(b []byte) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// findConfigs returns every keygate configuration in deploy/: the files
// named keygate.yaml, and the keygate.yaml entry of every ConfigMap.
func findConfigs(t *testing.T) []embeddedConfig {
	t.Helper()
	var out []embeddedConfig
	for _, f := range yamlFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == configFileName {
			out = append(out, embeddedConfig{where: f, body: b})
			continue
		}
		docs, err := decodeAll(b)
		if err != nil {
			continue // reported by TestEveryYAMLFileParses
		}
		for _, d := range docs {
			if d["kind"] != "ConfigMap" {
				continue
			}
			data, _ := d["data"].(map[string]any)
			if s, ok := data[configFileName].(string); ok {
				name, _ := d["metadata"].(map[string]any)["name"].(string)
				out = append(out, embeddedConfig{where: f + "#ConfigMap/" + name + "[" + configFileName + "]", body: []byte(s)})
			}
		}
	}
	return out
}

// loadConfig loads one deploy/ configuration, failing with its name.
func loadConfig(t *testing.T, where string) config.Config {
	t.Helper()
	for _, c := range findConfigs(t) {
		if c.where == where {
			cfg, err := config.Parse(c.body)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			return cfg
		}
	}
	t.Fatalf("%s: no such keygate configuration in deploy/", where)
	return config.Config{}
}

func TestEveryKeygateConfigLoads(t *testing.T) {
	t.Parallel()
	configs := findConfigs(t)
	var found []string
	for _, c := range configs {
		found = append(found, c.where)
	}
	// Discovery must at least see these, so a broken walk cannot pass.
	for _, want := range []string{
		"compose/keygate.yaml",
		"systemd/keygate.yaml",
		"kubernetes/manifests.yaml#ConfigMap/keygate[keygate.yaml]",
	} {
		if !slices.Contains(found, want) {
			t.Errorf("keygate configuration %s not found; found %q", want, found)
		}
	}
	for _, c := range configs {
		t.Run(c.where, func(t *testing.T) {
			t.Parallel()
			if _, err := config.Parse(c.body); err != nil {
				t.Errorf("%s: keygate's loader refuses it: %v", c.where, err)
			}
		})
	}
}

func TestEveryYAMLFileParses(t *testing.T) {
	t.Parallel()
	for _, f := range yamlFiles(t) {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := decodeAll(b)
			if err != nil {
				t.Fatalf("%s: not valid YAML: %v", f, err)
			}
			if len(docs) == 0 {
				t.Fatalf("%s: no YAML document", f)
			}
		})
	}
}

// Minimal shapes of the Kubernetes objects the checks read.
type (
	k8sMeta struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	}
	selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	probe struct {
		HTTPGet struct {
			Path string    `yaml:"path"`
			Port yaml.Node `yaml:"port"`
		} `yaml:"httpGet"`
	}
	container struct {
		Name  string   `yaml:"name"`
		Args  []string `yaml:"args"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env            []envVar `yaml:"env"`
		ReadinessProbe probe    `yaml:"readinessProbe"`
		LivenessProbe  probe    `yaml:"livenessProbe"`
		Lifecycle      struct {
			PreStop struct {
				Sleep struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		SecurityContext struct {
			ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		} `yaml:"securityContext"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	envVar struct {
		Name      string `yaml:"name"`
		ValueFrom struct {
			SecretKeyRef struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	}
	deployment struct {
		Spec struct {
			Replicas int      `yaml:"replicas"`
			Selector selector `yaml:"selector"`
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec struct {
					TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
					SecurityContext               struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
						RunAsUser    int  `yaml:"runAsUser"`
					} `yaml:"securityContext"`
					Containers []container `yaml:"containers"`
					Volumes    []struct {
						Name      string `yaml:"name"`
						ConfigMap struct {
							Name string `yaml:"name"`
						} `yaml:"configMap"`
						EmptyDir *struct{} `yaml:"emptyDir"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	pdb struct {
		Spec struct {
			MinAvailable int      `yaml:"minAvailable"`
			Selector     selector `yaml:"selector"`
		} `yaml:"spec"`
	}
	service struct {
		Spec struct {
			Selector map[string]string `yaml:"selector"`
			Ports    []struct {
				Name       string    `yaml:"name"`
				Port       int       `yaml:"port"`
				TargetPort yaml.Node `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
)

// readObject decodes the document of a manifest stream that is the object
// kind/name.
func readObject(t *testing.T, file, kind, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var m k8sMeta
		if err := n.Decode(&m); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m.Kind == kind && m.Metadata.Name == name {
			if err := n.Decode(v); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			return
		}
	}
	t.Fatalf("%s: no %s %s", file, kind, name)
}

// port returns the port of a listen address such as ":9090".
func port(t *testing.T, field, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", field, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: %v", field, addr, err)
	}
	return n
}

// containerPort resolves a probe or Service port (a number or a port name)
// against the container's ports.
func containerPort(t *testing.T, c container, n yaml.Node) int {
	t.Helper()
	if p, err := strconv.Atoi(n.Value); err == nil {
		return p
	}
	for _, p := range c.Ports {
		if p.Name == n.Value {
			return p.ContainerPort
		}
	}
	t.Fatalf("port %q: no such container port", n.Value)
	return 0
}

func TestKubernetesManifestsMatchTheirConfig(t *testing.T) {
	t.Parallel()
	const manifests = "kubernetes/manifests.yaml"
	cfg := loadConfig(t, manifests+"#ConfigMap/keygate[keygate.yaml]")
	var (
		dep deployment
		bud pdb
		svc service
	)
	readObject(t, manifests, "Deployment", "keygate", &dep)
	readObject(t, manifests, "PodDisruptionBudget", "keygate", &bud)
	readObject(t, manifests, "Service", "keygate", &svc)
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("deployment.yaml: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	adminPort := port(t, "server.admin_listen", cfg.Server.AdminListen)
	listenPort := port(t, "server.listen", cfg.Server.Listen)
	if h, _, _ := net.SplitHostPort(cfg.Server.AdminListen); h != "" {
		t.Errorf("configmap.yaml: server.admin_listen %q listens on %s only; the kubelet's probes need all interfaces (\":%d\")", cfg.Server.AdminListen, h, adminPort)
	}
	mountedAt := func(path string) (string, bool) {
		for _, m := range c.VolumeMounts {
			if m.MountPath == path {
				return m.Name, m.ReadOnly
			}
		}
		return "", false
	}

	tests := []struct {
		name string
		ok   bool
		msg  string
		args []any
	}{
		{"readiness probe is GET /readyz on the admin port",
			c.ReadinessProbe.HTTPGet.Path == "/readyz" && containerPort(t, c, c.ReadinessProbe.HTTPGet.Port) == adminPort,
			"deployment.yaml: readinessProbe %s on port %s, want /readyz on server.admin_listen's port %d",
			[]any{c.ReadinessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Port.Value, adminPort}},
		{"liveness probe is GET /healthz on the admin port",
			c.LivenessProbe.HTTPGet.Path == "/healthz" && containerPort(t, c, c.LivenessProbe.HTTPGet.Port) == adminPort,
			"deployment.yaml: livenessProbe %s on port %s, want /healthz on server.admin_listen's port %d",
			[]any{c.LivenessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Port.Value, adminPort}},
		{"three replicas", dep.Spec.Replicas == 3,
			"deployment.yaml: spec.replicas %d, want 3", []any{dep.Spec.Replicas}},
		{"ratelimit.replicas equals the Deployment's replicas", cfg.RateLimit.Replicas == dep.Spec.Replicas,
			"configmap.yaml: ratelimit.replicas %d, deployment.yaml spec.replicas %d: a Redis outage would divide limits wrongly",
			[]any{cfg.RateLimit.Replicas, dep.Spec.Replicas}},
		{"shared Redis keystore and limiter", cfg.Keystore.Backend == "redis" && cfg.RateLimit.Backend == "redis",
			"configmap.yaml: keystore.backend %q, ratelimit.backend %q; replicas need redis for both",
			[]any{cfg.Keystore.Backend, cfg.RateLimit.Backend}},
		{"pod template carries the selector's labels", labelsMatch(dep.Spec.Selector.MatchLabels, dep.Spec.Template.Metadata.Labels),
			"deployment.yaml: selector %v does not select the pod template's labels %v",
			[]any{dep.Spec.Selector.MatchLabels, dep.Spec.Template.Metadata.Labels}},
		{"PDB selects the Deployment's pods",
			len(bud.Spec.Selector.MatchLabels) > 0 && labelsMatch(bud.Spec.Selector.MatchLabels, dep.Spec.Template.Metadata.Labels) &&
				labelsMatch(dep.Spec.Selector.MatchLabels, bud.Spec.Selector.MatchLabels),
			"pdb.yaml: selector %v, deployment.yaml selector %v",
			[]any{bud.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels}},
		{"PDB keeps two replicas", bud.Spec.MinAvailable == 2,
			"pdb.yaml: minAvailable %d, want 2", []any{bud.Spec.MinAvailable}},
		{"Service selects the Deployment's pods",
			len(svc.Spec.Selector) > 0 && labelsMatch(svc.Spec.Selector, dep.Spec.Template.Metadata.Labels),
			"service.yaml: selector %v does not select the pods %v",
			[]any{svc.Spec.Selector, dep.Spec.Template.Metadata.Labels}},
		{"Service exposes the API port and not the admin port",
			len(svc.Spec.Ports) == 1 && containerPort(t, c, svc.Spec.Ports[0].TargetPort) == listenPort,
			"service.yaml: ports must be exactly one, targeting server.listen's port %d", []any{listenPort}},
		{"grace period covers preStop and drain",
			time.Duration(pod.TerminationGracePeriodSeconds)*time.Second > time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second+cfg.Server.DrainTimeout,
			"deployment.yaml: terminationGracePeriodSeconds %d must exceed preStop sleep %ds + server.drain_timeout %s",
			[]any{pod.TerminationGracePeriodSeconds, c.Lifecycle.PreStop.Sleep.Seconds, cfg.Server.DrainTimeout}},
		{"runs as non-root on a read-only root filesystem",
			pod.SecurityContext.RunAsNonRoot && pod.SecurityContext.RunAsUser == 65532 && c.SecurityContext.ReadOnlyRootFilesystem &&
				c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation,
			"deployment.yaml: want runAsNonRoot, runAsUser 65532, readOnlyRootFilesystem and no privilege escalation", nil},
		{"resource requests and limits are set",
			c.Resources.Requests["cpu"] != "" && c.Resources.Requests["memory"] != "" && c.Resources.Limits["memory"] != "",
			"deployment.yaml: want cpu and memory requests and a memory limit, got %v / %v",
			[]any{c.Resources.Requests, c.Resources.Limits}},
		{"the REDIS_PASSWORD variable comes from Secret keygate-redis",
			slices.ContainsFunc(c.Env, func(e envVar) bool {
				return e.Name == cfg.Redis.PasswordEnv && e.ValueFrom.SecretKeyRef.Name == "keygate-redis" && e.ValueFrom.SecretKeyRef.Key == "password"
			}),
			"deployment.yaml: no env %q from secretKeyRef keygate-redis/password (configmap.yaml redis.password_env)",
			[]any{cfg.Redis.PasswordEnv}},
		{"the ConfigMap is mounted read-only where the args point",
			func() bool {
				name, ro := mountedAt("/etc/keygate")
				for _, v := range pod.Volumes {
					if v.Name == name && v.ConfigMap.Name == "keygate" {
						return ro && slices.Equal(c.Args, []string{"serve", "--config", "/etc/keygate/" + configFileName})
					}
				}
				return false
			}(),
			"deployment.yaml: want ConfigMap keygate mounted read-only at /etc/keygate and args serve --config /etc/keygate/keygate.yaml, got args %q",
			[]any{c.Args}},
		{"the spool directory is a writable emptyDir",
			func() bool {
				if cfg.Server.SpoolDir == "" {
					return false // the default temp dir sits on the read-only root
				}
				name, ro := mountedAt(cfg.Server.SpoolDir)
				for _, v := range pod.Volumes {
					if v.Name == name && v.EmptyDir != nil {
						return !ro
					}
				}
				return false
			}(),
			"configmap.yaml server.spool_dir %q: want an emptyDir mounted there (the root filesystem is read-only)",
			[]any{cfg.Server.SpoolDir}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !tt.ok {
				t.Errorf(tt.msg, tt.args...)
			}
		})
	}
}

// labelsMatch reports whether every label of sel is in labels.
func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestKustomizationListsTheManifests(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	manifests, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range manifests {
		name := filepath.Base(m)
		listed := slices.Contains(k.Resources, name)
		switch name {
		case "kustomization.yaml", "values.yaml": // values.yaml: what manifests.yaml is generated from
		case "secret.example.yaml":
			if listed {
				t.Errorf("kustomization.yaml lists %s: `kubectl apply -k` would overwrite the real Secret with the placeholder", name)
			}
		default:
			if !listed {
				t.Errorf("kustomization.yaml does not list %s", name)
			}
		}
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join("kubernetes", r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
}

// composeFile is the part of compose.yaml the checks read.
type composeFile struct {
	Services map[string]struct {
		Image           string            `yaml:"image"`
		Command         []string          `yaml:"command"`
		Ports           []string          `yaml:"ports"`
		Volumes         []string          `yaml:"volumes"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
		Environment     map[string]string `yaml:"environment"`
	} `yaml:"services"`
}

func TestComposeRunsThreeReplicas(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	cfg := loadConfig(t, "compose/keygate.yaml")
	adminPort := strconv.Itoa(port(t, "server.admin_listen", cfg.Server.AdminListen))
	apiPort := strconv.Itoa(port(t, "server.listen", cfg.Server.Listen))

	var replicas []string
	for name, s := range cf.Services {
		if strings.HasPrefix(s.Image, "keygate") && len(s.Command) > 0 && s.Command[0] == "serve" {
			replicas = append(replicas, name)
		}
	}
	slices.Sort(replicas)
	if want := []string{"keygate-1", "keygate-2", "keygate-3"}; !slices.Equal(replicas, want) {
		t.Fatalf("compose.yaml: keygate replicas %q, want %q", replicas, want)
	}
	if cfg.RateLimit.Replicas != len(replicas) {
		t.Errorf("compose/keygate.yaml: ratelimit.replicas %d, but compose.yaml runs %d replicas", cfg.RateLimit.Replicas, len(replicas))
	}
	for _, target := range append(cfg.Upstreams.Extraction.Targets, cfg.Upstreams.Registry.Targets...) {
		host := strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")
		host, _, _ = net.SplitHostPort(host)
		if _, ok := cf.Services[host]; !ok {
			t.Errorf("compose/keygate.yaml: upstream %s is not a compose service", target)
		}
	}
	for _, name := range replicas {
		s := cf.Services[name]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if !slices.Contains(s.Volumes, "./keygate.yaml:/etc/keygate/keygate.yaml:ro") {
				t.Errorf("%s: compose/keygate.yaml is not mounted read-only at /etc/keygate/keygate.yaml (volumes %q)", name, s.Volumes)
			}
			if want := []string{"serve", "--config", "/etc/keygate/keygate.yaml"}; !slices.Equal(s.Command, want) {
				t.Errorf("%s: command %q, want %q", name, s.Command, want)
			}
			var api, admin bool
			for _, p := range s.Ports {
				parts := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
				switch container := parts[len(parts)-1]; {
				case container == apiPort:
					api = true
				case container == adminPort:
					admin = true
					if !strings.HasPrefix(p, "127.0.0.1:") {
						t.Errorf("%s: admin port published as %q; publish it on 127.0.0.1 only", name, p)
					}
				}
			}
			if !api || !admin {
				t.Errorf("%s: ports %q, want the API port %s and the admin port %s published", name, s.Ports, apiPort, adminPort)
			}
			grace, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil || grace <= cfg.Server.DrainTimeout {
				t.Errorf("%s: stop_grace_period %q must exceed server.drain_timeout %s", name, s.StopGracePeriod, cfg.Server.DrainTimeout)
			}
			if v, ok := s.Environment[cfg.Redis.PasswordEnv]; !ok || !strings.HasPrefix(v, "${") {
				t.Errorf("%s: environment %s must come from the host's environment (${…}), got %q", name, cfg.Redis.PasswordEnv, v)
			}
		})
	}
}

func TestSystemdUnitMatchesItsConfig(t *testing.T) {
	t.Parallel()
	cfg := loadConfig(t, "systemd/keygate.yaml")
	f, err := os.Open("systemd/keygate.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unit := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = append(unit[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	one := func(k string) string {
		if len(unit[k]) != 1 {
			return ""
		}
		return unit[k][0]
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	tests := []struct {
		name string
		ok   bool
		got  string
	}{
		{"ExecStart serves /etc/keygate/keygate.yaml", one("ExecStart") == "/usr/local/bin/keygate serve --config /etc/keygate/keygate.yaml", one("ExecStart")},
		{"TimeoutStopSec exceeds server.drain_timeout", err == nil && stop > cfg.Server.DrainTimeout, one("TimeoutStopSec") + " vs " + cfg.Server.DrainTimeout.String()},
		{"KillSignal is SIGTERM (keygate drains on it)", one("KillSignal") == "SIGTERM", one("KillSignal")},
		{"runs as a dedicated user", one("User") == "keygate", one("User")},
		{"state is writable", one("ReadWritePaths") == "/var/lib/keygate", one("ReadWritePaths")},
		{"the keystore lives in the state directory", strings.HasPrefix(cfg.Keystore.File, "/var/lib/keygate/"), cfg.Keystore.File},
		{"ACME certificates live in the state directory", cfg.TLS.Mode != "acme" || strings.HasPrefix(cfg.TLS.StoragePath, "/var/lib/keygate/"), cfg.TLS.StoragePath},
		{"admin endpoints stay on loopback", strings.HasPrefix(cfg.Server.AdminListen, "127.0.0.1:"), cfg.Server.AdminListen},
		{"NoNewPrivileges", one("NoNewPrivileges") == "yes", one("NoNewPrivileges")},
		{"ProtectSystem=strict", one("ProtectSystem") == "strict", one("ProtectSystem")},
		{"PrivateTmp", one("PrivateTmp") == "yes", one("PrivateTmp")},
		{"only CAP_NET_BIND_SERVICE", one("CapabilityBoundingSet") == "CAP_NET_BIND_SERVICE" && one("AmbientCapabilities") == "CAP_NET_BIND_SERVICE", one("CapabilityBoundingSet")},
		{"optional environment file", one("EnvironmentFile") == "-/etc/keygate/env", one("EnvironmentFile")},
		{"restarts on failure", one("Restart") == "on-failure", one("Restart")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !tt.ok {
				t.Errorf("systemd/keygate.service, systemd/keygate.yaml: got %q", tt.got)
			}
		})
	}
}

var (
	// realKey looks like an API key: a prefix then alphanumerics.
	realKey = regexp.MustCompile(`svc_(?:live|test)_[A-Za-z0-9]+`)
	// literalPassword is a YAML key ending in "password" with a value that
	// is not an obvious placeholder (<...>) or a variable reference ($...).
	passwordKey = regexp.MustCompile(`(?mi)^[\s-]*["']?[a-z_]*password["']?\s*:[ \t]*(.*)$`)
	placeholder = regexp.MustCompile(`^["']?(?:<[^>]+>|\$\{?[A-Za-z_]\w*.*)?["']?\s*(?:#.*)?$`)
)

// secretProblems returns what in b looks like a real key or password.
func secretProblems(b []byte) []string {
	var out []string
	for _, m := range realKey.FindAll(b, -1) {
		out = append(out, "an API key ("+string(m[:min(len(m), 12)])+"…)")
	}
	for _, m := range passwordKey.FindAllSubmatch(b, -1) {
		if !placeholder.Match(bytes.TrimSpace(m[1])) {
			out = append(out, "a literal password: value")
		}
	}
	return out
}

func TestSecretDetector(t *testing.T) {
	t.Parallel()
	key := "svc_" + "live_" + strings.Repeat("Ab3", 12)
	tests := []struct {
		name  string
		text  string
		flags bool
	}{
		{"a live key", "key: " + key, true},
		{"a test key in prose", "use svc_" + "test_abc123 here", true},
		{"a key prefix with an ellipsis", "keys start with svc_live_… or svc_test_…", false},
		{"a literal password", "redis:\n  pass" + "word: hunter2\n", true},
		{"a literal sentinel password", "  sentinel_pass" + "word: \"s3cret\"\n", true},
		{"a placeholder password", "  pass" + "word: \"<REPLACE-ME>\"\n", false},
		{"a password from a variable", "  pass" + "word: ${REDIS_PASSWORD}\n", false},
		{"an empty password key", "  pass" + "word:\n", false},
		{"password_env names a variable", "  password_env: REDIS_PASSWORD\n", false},
		{"the word in prose", "the Redis password comes from the environment\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := secretProblems([]byte(tt.text)); (len(got) > 0) != tt.flags {
				t.Errorf("secretProblems(%q) = %q, want flagged %v", tt.text, got, tt.flags)
			}
		})
	}
}

func TestNoSecretsInDeployFiles(t *testing.T) {
	t.Parallel()
	for _, f := range allFiles(t) {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range secretProblems(b) {
				t.Errorf("%s holds %s; deploy/ files must carry placeholders only", f, p)
			}
		})
	}
}
