package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad flags and files are refused before any cluster is contacted, with a
// message naming what is wrong.
func TestTopRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	badPolicy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte("apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Points at a server that does not exist: a test that got past the
	// flags would fail on it rather than touch a cluster.
	unreachable := filepath.Join("..", "..", "hack", "unreachable-kubeconfig.yaml")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-o", "xml"}, `-o "xml": want table, wide, json or yaml`},
		{[]string{"--sort", "speed"}, `--sort "speed": want one of rate, name, expiry, writers, interval, projected`},
		{[]string{"--resource", "pods"}, `--resource "pods": want leases, multiclusterleases or all`},
		{[]string{"--window", "500ms"}, "--window 500ms: want at least 1s"},
		{[]string{"--interval", "0s"}, "--interval 0s: want a positive duration"},
		{[]string{"--limit", "-1"}, "--limit -1: want 0 (all) or more"},
		{[]string{"-A", "-n", "x"}, "-A and -n are exclusive: -A watches every namespace"},
		{[]string{"--policy", badPolicy}, "policy file " + badPolicy + ": "},
		{[]string{"--policy", filepath.Join(dir, "missing.yaml")}, "policy file: open " + filepath.Join(dir, "missing.yaml")},
		{[]string{"--kubeconfig", filepath.Join(dir, "nokubeconfig")}, "kubeconfig: "},
		{[]string{"--kubeconfig", unreachable, "-A", "--once", "--resource", "leases"}, "listing leases.coordination.k8s.io in all namespaces: "},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newRootCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"top"}, tc.args...))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if out.Len() != 0 && !strings.HasPrefix(out.String(), "leaseguard top:") {
				t.Fatalf("printed %q", out.String())
			}
		})
	}
}
