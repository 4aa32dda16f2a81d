package leaseprojection

import (
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

// withRules is the sample policy with two more rules: a fixed designation
// and a holder bound by username.
func withRules(t *testing.T) *policy.Policy {
	t.Helper()
	extra := `
- name: fixed
  resources: [leases]
  namespaces: [fixed-ns]
  designation: system:serviceaccount:fixed-ns:the-one
- name: by-username
  resources: [leases]
  namespaces: [user-ns]
  managers: ["system:serviceaccount:user-ns:*"]
  holderBinding: username
`
	p, err := policyfile.Parse([]byte(sampleText(t)+extra), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAssumedWriter(t *testing.T) {
	p := withRules(t)
	h1 := func(ns, name string) *leaseobject.Object { return object(ns, name, "h1", 0, "") }
	cases := []struct {
		name      string
		res       leaseobject.Resource
		obj       *leaseobject.Object
		wantRule  string
		wantUser  string
		wantPod   string
		wantBasis leasetraffic.WriterBasis
		wantOK    bool
	}{
		{"designated by annotation", leaseobject.MultiClusterLeases, object("cnrm-system", "kcc-leader", "h1", 0, kcc+"a"),
			"kcc-mcl", kcc + "a", "h1", leasetraffic.WriterDesignated, true},
		{"no designation yet: the managers pattern", leaseobject.MultiClusterLeases, h1("cnrm-system", "kcc-leader"),
			"kcc-mcl", kcc + "*", "h1", leasetraffic.WriterPattern, true},
		{"bound lease: the manager of its capture, pod from the holder", leaseobject.Leases,
			object("cnrm-system", "kcc-leader-team-b", "cnrm-controller-manager-team-b-0_1234", 0, ""),
			"kcc-namespace-leases", kcc + "team-b", "cnrm-controller-manager-team-b-0", leasetraffic.WriterBound, true},
		{"lease name off the template: no writer", leaseobject.Leases, h1("cnrm-system", "other"),
			"kcc-namespace-leases", "", "", "", false},
		{"fixed designation", leaseobject.Leases, h1("fixed-ns", "x"),
			"fixed", "system:serviceaccount:fixed-ns:the-one", "h1", leasetraffic.WriterFixed, true},
		{"holderBinding username: the holder", leaseobject.Leases, object("user-ns", "x", "system:serviceaccount:user-ns:m", 0, ""),
			"by-username", "system:serviceaccount:user-ns:m", "system:serviceaccount:user-ns:m", leasetraffic.WriterPattern, true},
		{"no rule", leaseobject.Leases, h1("elsewhere", "x"), "", "", "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule, c, basis, ok := assumedWriter(p, tc.res, tc.obj)
			if rule != tc.wantRule || ok != tc.wantOK || c.Username != tc.wantUser || basis != tc.wantBasis || (ok && c.PodName != tc.wantPod) {
				t.Fatalf("assumedWriter = %q, %+v, %q, %v; want %q, %q (pod %q), %q, %v",
					rule, c, basis, ok, tc.wantRule, tc.wantUser, tc.wantPod, tc.wantBasis, tc.wantOK)
			}
		})
	}
}

// A renewal judged with the assumed writer passes every identity invariant
// and is held to the renewal rate: what leaseguard top projects.
func TestAssumedWriterIsJudgedOnTimingsOnly(t *testing.T) {
	p := sample(t, false).Policy
	const pod = "cnrm-controller-manager-team-a-0_1"
	old := object("cnrm-system", "kcc-leader-team-a", pod, 0, "")
	renewed := object("cnrm-system", "kcc-leader-team-a", pod, 2*time.Second, "")
	_, caller, _, ok := assumedWriter(p, leaseobject.Leases, renewed)
	if !ok || caller.Username != kcc+"team-a" {
		t.Fatalf("assumed writer %+v, %v", caller, ok)
	}
	d := policy.Decide(p, &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: caller, Old: old, New: renewed, Now: t0.Add(2 * time.Second)})
	if d.Verdict != policy.Warn || d.Invariant != policy.InvariantRenewalRate {
		t.Fatalf("decision %+v, want warn I6 (the bound-lease rule warns, auto interval 5s)", d)
	}
	later := object("cnrm-system", "kcc-leader-team-a", pod, 6*time.Second, "")
	if d := policy.Decide(p, &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: caller, Old: old, New: later, Now: t0.Add(6 * time.Second)}); d.Verdict != policy.Allow {
		t.Fatalf("a renewal 6s after the stored one: %+v, want allow", d)
	}
}
