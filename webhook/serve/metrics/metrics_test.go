package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

func TestDecisionsAreCountedByRuleVerdictAndInvariant(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r.Decision(leaseobject.MultiClusterLeases, &policy.Decision{Verdict: policy.Allow, Rule: "kcc-mcl", RenewalInterval: 6 * time.Second}, time.Microsecond)
	r.Decision(leaseobject.MultiClusterLeases, &policy.Decision{Verdict: policy.Deny, Rule: "kcc-mcl", Invariant: policy.InvariantRenewalRate, RenewalInterval: 2 * time.Second}, time.Microsecond)
	r.Decision(leaseobject.Leases, &policy.Decision{Verdict: policy.Warn, Rule: "bound", Invariant: policy.InvariantBound}, time.Microsecond)
	r.Decision(leaseobject.Leases, &policy.Decision{Verdict: policy.Allow}, time.Microsecond)
	r.Decision(leaseobject.MultiClusterLeases, &policy.Decision{Verdict: policy.Allow, Rule: "kcc-mcl", DesignationChanged: true}, time.Microsecond)
	r.Decision(leaseobject.MultiClusterLeases, &policy.Decision{Verdict: policy.Deny, Rule: "kcc-mcl", Invariant: policy.InvariantDesignationChange, DesignationChanged: true}, time.Microsecond)
	r.BadRequest("validate", "too_large")
	r.PolicyReload(false)

	want := `
# HELP leaseguard_decisions_total Admission decisions on lease writes, by resource, rule, verdict (allow, deny, warn, audit) and broken invariant.
# TYPE leaseguard_decisions_total counter
leaseguard_decisions_total{invariant="",resource="leases",rule="none",verdict="allow"} 1
leaseguard_decisions_total{invariant="",resource="multiclusterleases",rule="kcc-mcl",verdict="allow"} 2
leaseguard_decisions_total{invariant="I3",resource="multiclusterleases",rule="kcc-mcl",verdict="deny"} 1
leaseguard_decisions_total{invariant="I6",resource="multiclusterleases",rule="kcc-mcl",verdict="deny"} 1
leaseguard_decisions_total{invariant="I9",resource="leases",rule="bound",verdict="warn"} 1
# HELP leaseguard_designation_changes_total Admitted writes that changed the designated manager of a lease.
# TYPE leaseguard_designation_changes_total counter
leaseguard_designation_changes_total{rule="kcc-mcl"} 1
# HELP leaseguard_bad_requests_total Admission requests leaseguard could not read, by webhook and reason (unreadable, too_large, busy); validation refuses them (busy: fails the call, the failurePolicy decides), never allows.
# TYPE leaseguard_bad_requests_total counter
leaseguard_bad_requests_total{reason="too_large",webhook="validate"} 1
# HELP leaseguard_policy_file_valid 1 when the policy file on disk is the one being enforced, 0 when it is invalid and the last good policy is kept.
# TYPE leaseguard_policy_file_valid gauge
leaseguard_policy_file_valid 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leaseguard_decisions_total",
		"leaseguard_designation_changes_total", "leaseguard_bad_requests_total", "leaseguard_policy_file_valid"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r.renewalIntervals); n != 1 {
		t.Fatalf("renewal interval series = %d, want 1 (one rule)", n)
	}
	h, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range h {
		if fam.GetName() == "leaseguard_renewal_interval_seconds" {
			if c := fam.GetMetric()[0].GetHistogram().GetSampleCount(); c != 2 {
				t.Fatalf("renewal intervals observed = %d, want 2", c)
			}
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" || l.GetName() == "namespace" {
					t.Fatalf("%s has a per-object label %q", fam.GetName(), l.GetName())
				}
			}
		}
	}
}

func TestNilRecorderIsANoOp(t *testing.T) {
	var r *Recorder
	r.Decision(leaseobject.Leases, &policy.Decision{}, 0)
	r.BadRequest("validate", "too_large")
	r.PolicyReload(true)
	r.PolicyLoaded()
}

func TestAdmissionConfigurationSyncReportsBypassAndRepairs(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ManageAdmissionConfiguration(reg); err != nil {
		t.Fatal(err)
	}
	r.AdmissionConfigurationSync(true, false, 2, 1)
	r.AdmissionConfigurationSync(false, true, 0, 0)
	want := `
# HELP leaseguard_admission_configuration_bypassed 1 while leaseguard's validating webhook configuration carries the annotation leaseguard.io/bypass: an operator's deliberate bypass, and nothing is kept the rendering of the policy (--manage-webhook-configurations).
# TYPE leaseguard_admission_configuration_bypassed gauge
leaseguard_admission_configuration_bypassed 1
# HELP leaseguard_admission_configuration_in_sync 1 when leaseguard's webhook configurations (and coalescing policy) are the rendering of the policy in force (or, for a few minutes, of another replica's), 0 when they are not: keeping them so failed, an edit awaits repair, or a bypass keeps one (--manage-webhook-configurations; absent when off).
# TYPE leaseguard_admission_configuration_in_sync gauge
leaseguard_admission_configuration_in_sync 0
# HELP leaseguard_admission_configuration_repairs_total Writes that undid an edit of leaseguard's admission configuration by someone else, making it the rendering of the policy in force again (--manage-webhook-configurations).
# TYPE leaseguard_admission_configuration_repairs_total counter
leaseguard_admission_configuration_repairs_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leaseguard_admission_configuration_bypassed", "leaseguard_admission_configuration_in_sync", "leaseguard_admission_configuration_repairs_total"); err != nil {
		t.Error(err)
	}
}
