package config

import (
	"os"
	"testing"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// config/vap/vap.yaml is what `leaseguard vap` renders for the sample
// policy, config/samples/policy.yaml: run `make vap` after changing either.
func TestVAPManifestsAreGeneratedFromTheSamplePolicy(t *testing.T) {
	data, err := os.ReadFile(SamplePolicyPath)
	if err != nil {
		t.Fatal(err)
	}
	o := vap.Defaults()
	o.Coalescing = true
	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: o.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	r, err := vap.Render(p, o)
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.YAML(vap.Header("--config config/" + SamplePolicyPath + " --coalesce"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("vap/vap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("config/vap/vap.yaml is not what config/samples/policy.yaml renders: run `make vap`")
	}
}
