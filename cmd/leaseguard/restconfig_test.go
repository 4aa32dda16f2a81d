package main

import (
	"os"
	"path/filepath"
	"testing"
)

// serve reaches the API server the way every Kubernetes tool does: the
// --kubeconfig flag, else $KUBECONFIG (it used to go in-cluster only and
// ignore $KUBECONFIG, issue 40).
func TestServeHonoursKubeconfigAndItsEnvironmentVariable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, server string) string {
		path := filepath.Join(dir, name)
		data := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	fromEnv, fromFlag := write("env", "https://from-env.invalid:6443"), write("flag", "https://from-flag.invalid:6443")
	t.Setenv("KUBECONFIG", fromEnv)
	cfg, err := restConfig("")
	if err != nil {
		t.Fatalf("restConfig with $KUBECONFIG: %v", err)
	}
	if cfg.Host != "https://from-env.invalid:6443" {
		t.Errorf("restConfig without --kubeconfig reached %q, want $KUBECONFIG's server", cfg.Host)
	}
	if cfg, err = restConfig(fromFlag); err != nil || cfg.Host != "https://from-flag.invalid:6443" {
		t.Errorf("restConfig(--kubeconfig) = %v, %v; want the flag's server over $KUBECONFIG's", cfg, err)
	}
}
