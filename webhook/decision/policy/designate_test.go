package policy

import (
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"testing"
)

// TestDesignate: the mutating webhook stamps the caller on a manager's spec
// write under designation: auto when the stored designation is absent or
// stale (docs/policy.md, "Designation: auto"), and nowhere else. Every stamp
// must be admitted by the validating webhook.
func TestDesignate(t *testing.T) {
	p := mustCompile(t, decidePolicy)
	L := leaseobject.Leases
	cases := []struct {
		name string
		req  leaseobject.Request
		want string // "" = no stamp
	}{
		{"create by a manager", leaseobject.Request{Resource: L, Operation: leaseobject.Create, Caller: mgrA,
			New: mk(L, "team-auto", "l")}, "user:mgr-a"},
		{"renewal without designation", leaseobject.Request{Resource: L, Operation: leaseobject.Update, Caller: mgrB,
			Old: mk(L, "team-auto", "l"), New: mk(L, "team-auto", "l", renewAt(10*sec))}, "user:mgr-b"},
		{"renewal by the designated manager", leaseobject.Request{Resource: L, Operation: leaseobject.Update, Caller: mgrA,
			Old: mk(L, "team-auto", "l", desig("user:mgr-a")), New: mk(L, "team-auto", "l", desig("user:mgr-a"), renewAt(10*sec))}, ""},
		{"another manager while fresh", leaseobject.Request{Resource: L, Operation: leaseobject.Update, Caller: mgrB,
			Old: mk(L, "team-auto", "l", desig("user:mgr-a")), New: mk(L, "team-auto", "l", desig("user:mgr-a"), renewAt(17*sec))}, ""},
		{"another manager when stale", leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Update, Caller: mgrB,
			Old: mk(leaseobject.MultiClusterLeases, "team-auto", "l", desig("user:mgr-a")),
			New: mk(leaseobject.MultiClusterLeases, "team-auto", "l", desig("user:mgr-a"), takeover(leaseobject.MultiClusterLeases, "h2", 17*sec+1))}, "user:mgr-b"},
		{"metadata-only update", leaseobject.Request{Resource: L, Operation: leaseobject.Update, Caller: mgrA,
			Old: mk(L, "team-auto", "l"), New: mk(L, "team-auto", "l")}, ""},
		{"client changed the designation itself", leaseobject.Request{Resource: L, Operation: leaseobject.Update, Caller: mgrA,
			Old: mk(L, "team-auto", "l"), New: mk(L, "team-auto", "l", desig("user:mgr-a"), renewAt(10*sec))}, ""},
		{"delete", leaseobject.Request{Resource: L, Operation: leaseobject.Delete, Caller: mgrA, Old: mk(L, "team-auto", "l")}, ""},
		{"status subresource", leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Update, Subresource: leaseobject.StatusSubresource, Caller: mgrA,
			Old: mk(leaseobject.MultiClusterLeases, "team-auto", "l"), New: mk(leaseobject.MultiClusterLeases, "team-auto", "l", renewAt(10*sec))}, ""},
		{"non-manager", leaseobject.Request{Resource: L, Operation: leaseobject.Create, Caller: stranger, New: mk(L, "team-auto", "l")}, ""},
		{"operator", leaseobject.Request{Resource: L, Operation: leaseobject.Create, Caller: opGroup, New: mk(L, "team-auto", "l")}, ""},
		{"annotation mode", leaseobject.Request{Resource: L, Operation: leaseobject.Create, Caller: mgrA, New: mk(L, "team-annot", "l")}, ""},
		{"fixed mode", leaseobject.Request{Resource: L, Operation: leaseobject.Create, Caller: mgrFixed, New: mk(L, "team-fixed", "l")}, ""},
		{"no designation", leaseobject.Request{Resource: L, Operation: leaseobject.Create, Caller: mgrA, New: mk(L, "team-open", "l")}, ""},
		{"no rule", leaseobject.Request{Resource: L, Operation: leaseobject.Create, Caller: mgrA, New: mk(L, "elsewhere", "l")}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := t0.Add(10 * sec)
			if c.req.New != nil && !c.req.New.Spec.RenewTime.IsZero() && c.req.New.Spec.RenewTime.After(now) {
				now = c.req.New.Spec.RenewTime
			}
			req := c.req
			req.Now = now
			got, ok := Designate(p, &req)
			if got != c.want || ok != (c.want != "") {
				t.Fatalf("Designate = %q, %v; want %q, %v", got, ok, c.want, c.want != "")
			}
			if !ok {
				return
			}
			// The stamped write passes validation and counts as a change.
			stamped := *req.New
			stamped.Designated, stamped.HasDesignation = got, true
			req.New = &stamped
			d := Decide(p, &req)
			if d.Verdict != Allow || !d.DesignationChanged {
				t.Errorf("validation of the stamped write: %+v, want an allow with DesignationChanged", d)
			}
		})
	}
}
