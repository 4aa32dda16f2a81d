// Package chart tests charts/leaseguard against what it must agree with: the
// generator of the webhook configurations (leaseguard manifests), the
// kustomize install of config/, and, for the alerts of config/prometheus, the
// metrics webhook/serve/metrics registers. It runs the real helm, kubectl and
// promrules binaries: `make test-chart` and `make test-alerts` build them and
// set HELM, KUBECTL and PROMRULES; without them the tests that need one skip.
package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// root is the repository's root, from this package's folder.
const root = "../.."

// binary returns the path of a tool the Makefile passes in the environment,
// or skips the test.
func binary(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Skipf("%s is not set: run `make test-chart test-alerts`", env)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s=%s: %v", env, p, err)
	}
	return p
}

// run runs a command and returns its standard output; it fails the test on
// an error, with standard error.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), err)
	}
	return out
}

type cmdError struct {
	err    error
	stderr string
}

func (e *cmdError) Error() string { return e.err.Error() + ": " + e.stderr }

func runErr(name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, &cmdError{err: err, stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

// object is one rendered manifest, as generic JSON.
type object = map[string]any

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// objects splits a multi-document YAML stream into objects, skipping
// documents of comments only.
func objects(t *testing.T, data []byte) []object {
	t.Helper()
	var out []object
	for _, doc := range docSeparator.Split(string(data), -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if len(o) == 0 {
			continue
		}
		out = append(out, o)
	}
	return out
}

// key names an object: kind/namespace/name.
func key(o object) string {
	meta, _ := o["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	kind, _ := o["kind"].(string)
	return kind + "/" + ns + "/" + name
}

func byKey(t *testing.T, objs []object) map[string]object {
	t.Helper()
	m := make(map[string]object, len(objs))
	for _, o := range objs {
		k := key(o)
		if _, dup := m[k]; dup {
			t.Fatalf("%s rendered twice", k)
		}
		m[k] = o
	}
	return m
}

// toYAML is for failure messages.
func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
