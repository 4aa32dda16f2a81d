package policy

import (
	"testing"
)

func TestAssumedWriter(t *testing.T) {
	p := mustCompile(t, readSample(t)+`
- name: fixed
  resources: [leases]
  namespaces: [fixed-ns]
  designation: system:serviceaccount:fixed-ns:the-one
- name: by-username
  resources: [leases]
  namespaces: [user-ns]
  managers: ["system:serviceaccount:user-ns:*"]
  holderBinding: username
`)
	const kcc = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	cases := []struct {
		name      string
		res       Resource
		obj       *Object
		wantRule  string
		wantUser  string
		wantPod   string
		wantBasis WriterBasis
		wantOK    bool
	}{
		{"designated by annotation", MultiClusterLeases, mk(MultiClusterLeases, "cnrm-system", "kcc-leader", desig(kcc+"a")),
			"kcc-mcl", kcc + "a", "h1", WriterDesignated, true},
		{"no designation yet: the managers pattern", MultiClusterLeases, mk(MultiClusterLeases, "cnrm-system", "kcc-leader"),
			"kcc-mcl", kcc + "*", "h1", WriterPattern, true},
		{"bound lease: the manager of its capture, pod from the holder", Leases,
			mk(Leases, "cnrm-system", "kcc-leader-team-b", holder("cnrm-controller-manager-team-b-0_1234")),
			"kcc-namespace-leases", kcc + "team-b", "cnrm-controller-manager-team-b-0", WriterBound, true},
		{"lease name off the template: no writer", Leases, mk(Leases, "cnrm-system", "other"),
			"kcc-namespace-leases", "", "", "", false},
		{"fixed designation", Leases, mk(Leases, "fixed-ns", "x"),
			"fixed", "system:serviceaccount:fixed-ns:the-one", "h1", WriterFixed, true},
		{"holderBinding username: the holder", Leases, mk(Leases, "user-ns", "x", holder("system:serviceaccount:user-ns:m")),
			"by-username", "system:serviceaccount:user-ns:m", "system:serviceaccount:user-ns:m", WriterPattern, true},
		{"no rule", Leases, mk(Leases, "elsewhere", "x"), "", "", "", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule, c, basis, ok := AssumedWriter(p, tc.res, tc.obj)
			if rule != tc.wantRule || ok != tc.wantOK || c.Username != tc.wantUser || basis != tc.wantBasis || (ok && c.PodName != tc.wantPod) {
				t.Fatalf("AssumedWriter = %q, %+v, %q, %v; want %q, %q (pod %q), %q, %v",
					rule, c, basis, ok, tc.wantRule, tc.wantUser, tc.wantPod, tc.wantBasis, tc.wantOK)
			}
		})
	}
}

// A renewal judged with the assumed writer passes every identity invariant
// and is held to the renewal rate: what leaseguard top projects.
func TestAssumedWriterIsJudgedOnTimingsOnly(t *testing.T) {
	p := mustCompile(t, readSample(t))
	const kcc = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	old := mk(Leases, "cnrm-system", "kcc-leader-team-a", holder("cnrm-controller-manager-team-a-0_1"))
	renewed := mk(Leases, "cnrm-system", "kcc-leader-team-a", holder("cnrm-controller-manager-team-a-0_1"), renewAt(2*sec))
	_, caller, _, ok := AssumedWriter(p, Leases, renewed)
	if !ok || caller.Username != kcc+"team-a" {
		t.Fatalf("assumed writer %+v, %v", caller, ok)
	}
	d := Decide(p, &Request{Resource: Leases, Operation: Update, Caller: caller, Old: old, New: renewed, Now: t0.Add(2 * sec)})
	if d.Verdict != Warn || d.Invariant != InvariantRenewalRate {
		t.Fatalf("decision %+v, want warn I6 (the bound-lease rule warns, auto interval 5s)", d)
	}
	later := mk(Leases, "cnrm-system", "kcc-leader-team-a", holder("cnrm-controller-manager-team-a-0_1"), renewAt(6*sec))
	if d := Decide(p, &Request{Resource: Leases, Operation: Update, Caller: caller, Old: old, New: later, Now: t0.Add(6 * sec)}); d.Verdict != Allow {
		t.Fatalf("a renewal 6s after the stored one: %+v, want allow", d)
	}
}
