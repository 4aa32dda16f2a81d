package leaseprojection

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

const kcc = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func object(ns, name, holder string, renew time.Duration, designated string) *leaseobject.Object {
	o := &leaseobject.Object{Namespace: ns, Name: name, CreationTimestamp: t0.Add(-time.Hour),
		Spec: leaseobject.Spec{Holder: holder, RenewTime: t0.Add(renew), LeaseDuration: 15 * time.Second}}
	if designated != "" {
		o.Designated, o.HasDesignation = designated, true
	}
	return o
}

// sampleText is config/samples/policy.yaml.
func sampleText(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../../config/samples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// sample is config/samples/policy.yaml, with its coalesceRenewals lines or
// without them.
func sample(t *testing.T, coalescing bool) *Projector {
	t.Helper()
	data := []byte(sampleText(t))
	if !coalescing {
		data = regexp.MustCompile(`(?m)^\s*coalesceRenewals:.*\n`).ReplaceAll(data, nil)
	}
	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	return &Projector{Policy: p, OwnNamespace: "leaseguard-system"}
}

func TestProject(t *testing.T) {
	pr := sample(t, false)
	const pod = "cnrm-controller-manager-team-a-0_1"
	cases := []struct {
		name     string
		res      leaseobject.Resource
		old, new *leaseobject.Object
		status   bool
		want     leasetraffic.Projection
	}{
		{"bound lease renewed after 2s: warned (I6, the rule warns)", leaseobject.Leases,
			object("cnrm-system", "kcc-leader-team-a", pod, 0, ""), object("cnrm-system", "kcc-leader-team-a", pod, 2*time.Second, ""), false,
			leasetraffic.Projection{Judged: true, Rule: "kcc-namespace-leases", Verdict: policy.Warn, Invariant: policy.InvariantRenewalRate, Basis: leasetraffic.WriterBound}},
		// A shared renewal of a MultiClusterLease is never refused
		// (docs/design.md §4): without coalescing it is stored.
		{"shared lease renewed after 2s: admitted (never rate limited)", leaseobject.MultiClusterLeases,
			object("cnrm-system", "kcc-leader", "cluster-a", 0, kcc+"team-a"), object("cnrm-system", "kcc-leader", "cluster-a", 2*time.Second, kcc+"team-a"), false,
			leasetraffic.Projection{Judged: true, Rule: "kcc-mcl", Verdict: policy.Allow, Basis: leasetraffic.WriterDesignated}},
		{"shared lease renewed after 6s: admitted", leaseobject.MultiClusterLeases,
			object("cnrm-system", "kcc-leader", "cluster-a", 0, kcc+"team-a"), object("cnrm-system", "kcc-leader", "cluster-a", 6*time.Second, kcc+"team-a"), false,
			leasetraffic.Projection{Judged: true, Rule: "kcc-mcl", Verdict: policy.Allow, Basis: leasetraffic.WriterDesignated}},
		{"holder taken before expiry: refused (I4)", leaseobject.MultiClusterLeases,
			object("cnrm-system", "kcc-leader", "cluster-a", 0, kcc+"team-a"), object("cnrm-system", "kcc-leader", "cluster-b", 6*time.Second, kcc+"team-a"), false,
			leasetraffic.Projection{Judged: true, Rule: "kcc-mcl", Verdict: policy.Deny, Invariant: policy.InvariantFencing, Code: 403, Basis: leasetraffic.WriterDesignated}},
		{"created: judged as a CREATE", leaseobject.MultiClusterLeases, nil, object("cnrm-system", "kcc-leader", "cluster-a", 0, kcc+"team-a"), false,
			leasetraffic.Projection{Judged: true, Rule: "kcc-mcl", Verdict: policy.Allow, Basis: leasetraffic.WriterDesignated}},
		{"status write: not judged", leaseobject.MultiClusterLeases,
			object("cnrm-system", "kcc-leader", "cluster-a", 0, kcc+"team-a"), object("cnrm-system", "kcc-leader", "cluster-a", 0, kcc+"team-a"), true,
			leasetraffic.Projection{}},
		{"kube-system: never sent to the webhook", leaseobject.Leases,
			object("kube-system", "kube-scheduler", "x", 0, ""), object("kube-system", "kube-scheduler", "x", time.Second, ""), false,
			leasetraffic.Projection{}},
		{"no rule selects it", leaseobject.Leases, object("apps", "x", "h", 0, ""), object("apps", "x", "h", time.Second, ""), false,
			leasetraffic.Projection{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := pr.Project(tc.res, tc.old, tc.new, t0.Add(tc.new.Spec.RenewTime.Sub(t0)), tc.status); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// With coalesceRenewals, an early renewal by the rightful renewer never
// reaches validation: it is projected as coalesced, not as held back; a due
// renewal, or an early one by someone else, is decided as before.
func TestProjectCoalescing(t *testing.T) {
	pr := sample(t, true)
	const pod = "cnrm-controller-manager-team-a-0_1"
	mcl := func(holder string, renew time.Duration) *leaseobject.Object {
		return object("cnrm-system", "kcc-leader", holder, renew, kcc+"team-a")
	}
	cases := []struct {
		name     string
		res      leaseobject.Resource
		old, new *leaseobject.Object
		want     leasetraffic.Projection
	}{
		{"shared lease renewed after 2s: coalesced", leaseobject.MultiClusterLeases, mcl("cluster-a", 0), mcl("cluster-a", 2*time.Second),
			leasetraffic.Projection{Judged: true, Rule: "kcc-mcl", Coalesced: true, Basis: leasetraffic.WriterDesignated}},
		{"bound lease renewed after 2s: coalesced", leaseobject.Leases,
			object("cnrm-system", "kcc-leader-team-a", pod, 0, ""), object("cnrm-system", "kcc-leader-team-a", pod, 2*time.Second, ""),
			leasetraffic.Projection{Judged: true, Rule: "kcc-namespace-leases", Coalesced: true, Basis: leasetraffic.WriterBound}},
		{"shared lease renewed after the interval: admitted", leaseobject.MultiClusterLeases, mcl("cluster-a", 0), mcl("cluster-a", 7*time.Second),
			leasetraffic.Projection{Judged: true, Rule: "kcc-mcl", Verdict: policy.Allow, Basis: leasetraffic.WriterDesignated}},
		{"holder changed 2s later: decided, refused (I4)", leaseobject.MultiClusterLeases, mcl("cluster-a", 0), mcl("cluster-b", 2*time.Second),
			leasetraffic.Projection{Judged: true, Rule: "kcc-mcl", Verdict: policy.Deny, Invariant: policy.InvariantFencing, Code: 403, Basis: leasetraffic.WriterDesignated}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := pr.Project(tc.res, tc.old, tc.new, t0.Add(tc.new.Spec.RenewTime.Sub(t0)), false); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
