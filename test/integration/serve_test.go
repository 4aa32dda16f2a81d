package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `leaseguard serve` refuses to start rather than serve without a good
// policy or certificate, and says which file and line is wrong.
func TestServeRefusesToStartOnBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", basePolicy)
	misspelt := write("misspelt.yaml", strings.Replace(basePolicy, "  managers: [\"system:serviceaccount:nowhere:nobody\"]", "  manager: [\"system:serviceaccount:nowhere:nobody\"]", 1))
	invalid := write("invalid.yaml", strings.Replace(basePolicy, "enforcement: warn", "enforcement: block", 1))
	garbageKey := write("tls.key", "not a key")
	garbageCert := write("tls.crt", "not a certificate")

	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"misspelt field", []string{"--config", misspelt, "--cert-dir", cp.WebhookCertDir},
			[]string{"policy file " + misspelt, "line 68: field manager not found in type v1alpha1.Rule"}},
		{"invalid value", []string{"--config", invalid, "--cert-dir", cp.WebhookCertDir},
			[]string{"policy file " + invalid, `line 16: rules[1].enforcement: Unsupported value: "block": supported values: "deny", "warn", "audit"`}},
		{"missing policy file", []string{"--config", filepath.Join(dir, "nope.yaml"), "--cert-dir", cp.WebhookCertDir},
			[]string{"policy file: open " + filepath.Join(dir, "nope.yaml") + ": no such file or directory"}},
		{"corrupt key pair", []string{"--config", good, "--cert-dir", dir},
			[]string{"serving certificate " + garbageCert + " / key " + garbageKey}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, append([]string{"serve", "--webhook-port", "0", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, tc.args...)...)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("serve kept running on bad input")
			}
			if err == nil {
				t.Fatalf("serve exited 0 on bad input:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
