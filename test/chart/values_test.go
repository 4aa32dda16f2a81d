package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// renderValues renders the chart into namespace lg with a values file of
// the given YAML and extra helm flags.
func renderValues(t *testing.T, values string, args ...string) map[string]object {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return byKey(t, helmTemplate(t, "lg", append([]string{"-f", f}, args...)...))
}

// field walks a rendered object down a path of map keys and list indexes.
func field(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := o.(map[string]any)
			o = m[k]
		case int:
			l, _ := o.([]any)
			if k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

// fromYAML is the generic JSON form of a YAML literal, to compare rendered
// fields with.
func fromYAML(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return v
}

func wantField(t *testing.T, o object, want string, path ...any) {
	t.Helper()
	got := field(o, path...)
	if w := fromYAML(t, want); !reflect.DeepEqual(got, w) {
		t.Errorf("%s %v:\n%s\nwant\n%s", key(o), path, toYAML(got), toYAML(w))
	}
}

const deployment = "Deployment/lg/leaseguard"

var (
	podSpec   = []any{"spec", "template", "spec"}
	container = []any{"spec", "template", "spec", "containers", 0}
)

func at(base []any, path ...any) []any { return slices.Concat(base, path) }

// The defaults are config/manager's (TestChartMatchesKustomize compares
// them field by field); here, what they are, so that a change to values.yaml
// is seen as one.
func TestChartValuesDefaults(t *testing.T) {
	d := renderValues(t, "{}")[deployment]
	wantField(t, d, `{runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}`, at(podSpec, "securityContext")...)
	wantField(t, d, `{allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}`, at(container, "securityContext")...)
	wantField(t, d, `system-cluster-critical`, at(podSpec, "priorityClassName")...)
	wantField(t, d, `
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
  - weight: 100
    podAffinityTerm:
      topologyKey: kubernetes.io/hostname
      labelSelector: {matchLabels: {app.kubernetes.io/name: leaseguard, app.kubernetes.io/component: webhook}}`, at(podSpec, "affinity")...)
	wantField(t, d, `
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector: {matchLabels: {app.kubernetes.io/name: leaseguard, app.kubernetes.io/component: webhook}}`, at(podSpec, "topologySpreadConstraints")...)
	args := strings.Join(asStrings(field(d, at(container, "args")...)), " ")
	if strings.Contains(args, "--zap-log-level") {
		t.Errorf("args %s: a log level by default, want the binary's", args)
	}
	wantField(t, d, `null`, "spec", "template", "metadata", "annotations")
	if env := field(d, at(container, "env")...).([]any); len(env) != 2 {
		t.Errorf("env: %s, want POD_NAMESPACE and GOMEMLIMIT only", toYAML(env))
	}

	// One replica: no spreading to do.
	d = renderValues(t, "replicas: 1")[deployment]
	wantField(t, d, `null`, at(podSpec, "topologySpreadConstraints")...)
}

func asStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, s := range l {
		str, _ := s.(string)
		out = append(out, str)
	}
	return out
}

// Every value of the Deployment and ServiceAccount lands where it should.
func TestChartValuesLand(t *testing.T) {
	objs := renderValues(t, `
podSecurityContext:
  # OpenShift's restricted-v2 assigns the UID and GID from the namespace's range.
  runAsUser: null
  runAsGroup: null
  fsGroup: 1000700000
securityContext:
  runAsNonRoot: true
affinity:
  podAntiAffinity: null
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: node-role.kubernetes.io/infra, operator: Exists}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: DoNotSchedule
  labelSelector: {matchLabels: {team: guard}}
replicas: 3
podAnnotations:
  example.com/owner: platform
podLabels:
  team: guard
extraArgs: ["--zap-encoder=console", "--shutdown-drain=5s"]
extraEnv:
- {name: HTTPS_PROXY, value: "http://proxy:3128"}
- name: NODE
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
logLevel: debug
priorityClassName: leaseguard-high
serviceAccount:
  annotations:
    iam.gke.io/gcp-service-account: leaseguard@project.iam.gserviceaccount.com
`)
	d := objs[deployment]
	wantField(t, d, `{runAsNonRoot: true, fsGroup: 1000700000, seccompProfile: {type: RuntimeDefault}}`, at(podSpec, "securityContext")...)
	wantField(t, d, `{allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}, runAsNonRoot: true}`, at(container, "securityContext")...)
	wantField(t, d, `
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
    - matchExpressions:
      - {key: node-role.kubernetes.io/infra, operator: Exists}`, at(podSpec, "affinity")...)
	wantField(t, d, `[{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {team: guard}}}]`,
		at(podSpec, "topologySpreadConstraints")...)
	wantField(t, d, `{example.com/owner: platform}`, "spec", "template", "metadata", "annotations")
	wantField(t, d, `{app.kubernetes.io/name: leaseguard, app.kubernetes.io/component: webhook, team: guard}`, "spec", "template", "metadata", "labels")
	// The selector stays config/manager's (it is immutable).
	wantField(t, d, `{app.kubernetes.io/name: leaseguard, app.kubernetes.io/component: webhook}`, "spec", "selector", "matchLabels")
	args := asStrings(field(d, at(container, "args")...))
	if n := len(args); n < 4 || !slices.Equal(args[n-3:], []string{"--zap-log-level=debug", "--zap-encoder=console", "--shutdown-drain=5s"}) {
		t.Errorf("args %q: want the log level, then extraArgs, last", args)
	}
	env := field(d, at(container, "env")...).([]any)
	if len(env) != 4 {
		t.Fatalf("env %s: want POD_NAMESPACE, GOMEMLIMIT and the two extraEnv", toYAML(env))
	}
	wantField(t, d, `{name: HTTPS_PROXY, value: "http://proxy:3128"}`, at(container, "env", 2)...)
	wantField(t, d, `{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}`, at(container, "env", 3)...)
	wantField(t, d, `leaseguard-high`, at(podSpec, "priorityClassName")...)
	wantField(t, objs["ServiceAccount/lg/leaseguard"], `{iam.gke.io/gcp-service-account: leaseguard@project.iam.gserviceaccount.com}`, "metadata", "annotations")

	// Pod annotations sit beside the client CA's checksum.
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d = renderValues(t, "podAnnotations: {example.com/owner: platform}", "--set-file", "apiServerAuthentication.clientCA="+ca)[deployment]
	ann, _ := field(d, "spec", "template", "metadata", "annotations").(map[string]any)
	if ann["example.com/owner"] != "platform" || ann["checksum/client-ca"] == nil {
		t.Errorf("annotations %v: want podAnnotations and checksum/client-ca", ann)
	}

	// A verbosity level, and no priority class.
	d = renderValues(t, "{}", "--set", "logLevel=3", "--set", "priorityClassName=")[deployment]
	if args := asStrings(field(d, at(container, "args")...)); !slices.Contains(args, "--zap-log-level=3") {
		t.Errorf("args %q: want --zap-log-level=3", args)
	}
	wantField(t, d, `null`, at(podSpec, "priorityClassName")...)
	// No affinity, no spreading.
	d = renderValues(t, "{affinity: null, topologySpreadConstraints: []}")[deployment]
	wantField(t, d, `null`, at(podSpec, "affinity")...)
	wantField(t, d, `null`, at(podSpec, "topologySpreadConstraints")...)
}

// The ServiceMonitor sends a Secret's token (authorization, not the
// deprecated bearerTokenFile) and verifies the certificate with leaseguard's
// CA in both certificate modes, never skipping verification.
func TestChartServiceMonitorAuthorization(t *testing.T) {
	for mode, caSecret := range map[string]string{"certManager": "leaseguard-webhook-server-cert", "selfManaged": "leaseguard-ca"} {
		t.Run(mode, func(t *testing.T) {
			objs := renderValues(t, "{serviceMonitor: {enabled: true}, certificates: {mode: "+mode+"}}")
			sm := objs["ServiceMonitor/lg/leaseguard"]
			wantField(t, sm, `
port: metrics
path: /metrics
scheme: https
interval: 30s
authorization: {type: Bearer, credentials: {name: leaseguard-metrics-scraper-token, key: token}}
tlsConfig:
  serverName: leaseguard-webhook-service.lg.svc
  ca: {secret: {name: `+caSecret+`, key: ca.crt}}`, "spec", "endpoints", 0)
			wantField(t, objs["ServiceAccount/lg/leaseguard-metrics-scraper"], `false`, "automountServiceAccountToken")
			secret := objs["Secret/lg/leaseguard-metrics-scraper-token"]
			wantField(t, secret, `kubernetes.io/service-account-token`, "type")
			wantField(t, secret, `{kubernetes.io/service-account.name: leaseguard-metrics-scraper}`, "metadata", "annotations")
			crb := objs["ClusterRoleBinding//leaseguard-metrics-scraper"]
			wantField(t, crb, `{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: leaseguard-metrics-reader}`, "roleRef")
			wantField(t, crb, `[{kind: ServiceAccount, name: leaseguard-metrics-scraper, namespace: lg}]`, "subjects")
		})
	}
	// A Secret of one's own: no scraper identity of the chart's.
	objs := renderValues(t, "{serviceMonitor: {enabled: true, authorization: {credentials: {name: prom-token, key: bearer}}}}")
	wantField(t, objs["ServiceMonitor/lg/leaseguard"], `{type: Bearer, credentials: {name: prom-token, key: bearer}}`, "spec", "endpoints", 0, "authorization")
	for _, k := range []string{"ServiceAccount/lg/leaseguard-metrics-scraper", "Secret/lg/leaseguard-metrics-scraper-token", "ClusterRoleBinding//leaseguard-metrics-scraper"} {
		if objs[k] != nil {
			t.Errorf("%s rendered with a Secret of the user's", k)
		}
	}
	// Off: nothing of it.
	for k := range renderValues(t, "{}") {
		if strings.Contains(k, "metrics-scraper") || strings.HasPrefix(k, "ServiceMonitor/") {
			t.Errorf("%s rendered with serviceMonitor.enabled false", k)
		}
	}
}

// values.schema.json refuses a value of the wrong type or outside its enum
// before anything renders; the chart refuses pod labels that would change
// the selector.
func TestChartValuesSchema(t *testing.T) {
	helm := binary(t, "HELM")
	const schemaError = "values don't meet the specifications of the schema"
	for _, bad := range [][]string{
		{"--set", "logLevel=verbose"},
		{"--set", "logLevel=0"},
		{"--set", "logLevel=-1"},
		{"--set-json", "logLevel=true"},
		{"--set", "extraArgs=--zap-encoder=console"},
		{"--set-json", "extraArgs=[1]"},
		{"--set-json", `extraEnv=[{"value":"no name"}]`},
		{"--set-json", `extraEnv=["HTTPS_PROXY=x"]`},
		{"--set-json", `extraEnv=[{"name":"A","value":1}]`},
		{"--set-json", `podAnnotations={"a":1}`},
		{"--set-json", `podAnnotations=["a"]`},
		{"--set-json", `podLabels={"team":true}`},
		{"--set-json", `serviceAccount.annotations="a=b"`},
		{"--set", "serviceAccount.name=other"},
		{"--set-json", `podSecurityContext.runAsUser="root"`},
		{"--set", "podSecurityContext.runAsUser=-1"},
		{"--set", "podSecurityContext.seccompProfile.type=Default"},
		{"--set-json", `podSecurityContext=true`},
		{"--set-json", `securityContext.allowPrivilegeEscalation="no"`},
		{"--set-json", `securityContext.capabilities.drop="ALL"`},
		{"--set-json", `affinity=[]`},
		{"--set-json", `topologySpreadConstraints={}`},
		{"--set", "topologySpreadConstraints[0].whenUnsatisfiable=Maybe"},
		{"--set-json", `topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"zone"}]`},
		{"--set-json", "priorityClassName=5"},
		{"--set", "serviceMonitor.authorization.credentials.key="},
		{"--set", "serviceMonitor.authorization.credentials.nme=x"},
		{"--set-json", "serviceMonitor.authorization.credentials.name=1"},
	} {
		_, err := runErr(helm, append(templateArgs("lg"), bad...)...)
		if err == nil || !strings.Contains(err.Error(), schemaError) {
			t.Errorf("helm template %s: err = %v, want the schema to refuse it", strings.Join(bad, " "), err)
		}
	}
	_, err := runErr(helm, append(templateArgs("lg"), "--set", "podLabels.app\\.kubernetes\\.io/component=other")...)
	if err == nil || !strings.Contains(err.Error(), "podLabels: app.kubernetes.io/component is the Deployment's selector label") {
		t.Errorf("podLabels naming a selector label: err = %v, want the chart to refuse it", err)
	}
	// What the schema accepts beside the defaults.
	for _, good := range [][]string{
		{"--set", "logLevel=info"},
		{"--set", "logLevel=10"},
		{"--set-string", "logLevel=2"},
		{"--set", "podSecurityContext.runAsUser=null"},
		{"--set", "serviceMonitor.enabled=true,serviceMonitor.authorization.credentials.name=tok"},
	} {
		if _, err := runErr(helm, append(templateArgs("lg"), good...)...); err != nil {
			t.Errorf("helm template %s: %v", strings.Join(good, " "), err)
		}
	}
}
