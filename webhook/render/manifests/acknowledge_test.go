package manifests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
)

// The sample policy's MutatingAdmissionPolicy
// sets renewTime back exactly where the webhook would (policy.Coalesce or
// policy.Acknowledge): the other managers' renewals of the shared
// MultiClusterLease are answered in the API server. Each case is judged by
// the rendered CEL and by the Go decision on the same objects, decoded as
// the webhook decodes them; no case lies within a second of a bound, where
// the CEL, reading the clock in whole seconds, stores what Go might
// acknowledge.
func TestAcknowledgementInTheAPIServerMatchesTheWebhook(t *testing.T) {
	p := samplePolicy(t)
	r, err := Render(p, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	if r.Coalescing == nil {
		t.Fatal("no MutatingAdmissionPolicy rendered")
	}
	setBack := program(t, condition(r.Coalescing.Spec.MatchConditions, "early-or-acknowledged-renewal"))

	stored := time.Date(2026, 12, 5, 6, 0, 10, 123456000, time.UTC)
	type write struct {
		user   string
		groups []string
		at     time.Time // the API server's clock
		edit   func(old, obj map[string]any)
	}
	renewAt := func(t time.Time) func(old, obj map[string]any) {
		return func(_, obj map[string]any) { obj["spec"].(map[string]any)["renewTime"] = t.Format(micro) }
	}
	cases := []struct {
		name string
		w    write
		want bool
	}{
		{"another manager's renewal of a fresh lease is acknowledged", write{managerB, nil, stored.Add(2500 * time.Millisecond), renewAt(stored.Add(2 * time.Second))}, true},
		{"the designated manager's early renewal is coalesced", write{designatedA, nil, stored.Add(2500 * time.Millisecond), renewAt(stored.Add(2 * time.Second))}, true},
		{"the designated manager's due renewal is stored", write{designatedA, nil, stored.Add(8500 * time.Millisecond), renewAt(stored.Add(8 * time.Second))}, false},
		{"another manager's renewal once the designated lease went stale is stored", write{managerB, nil, stored.Add(20 * time.Second), renewAt(stored.Add(20 * time.Second))}, false},
		{"another manager's renewal ahead of the clock is left to validation", write{managerB, nil, stored.Add(2500 * time.Millisecond), renewAt(stored.Add(10 * time.Second))}, false},
		{"an operator's renewal is stored", write{"admin", []string{"system:masters"}, stored.Add(2500 * time.Millisecond), renewAt(stored.Add(2 * time.Second))}, false},
		{"a stranger's renewal is left to validation", write{"system:serviceaccount:default:stranger", nil, stored.Add(2500 * time.Millisecond), renewAt(stored.Add(2 * time.Second))}, false},
		{"another manager's holder change is not a renewal", write{managerB, nil, stored.Add(2500 * time.Millisecond), func(old, obj map[string]any) {
			renewAt(stored.Add(2*time.Second))(old, obj)
			obj["spec"].(map[string]any)["holderIdentity"] = "cluster-b"
		}}, false},
		{"another manager's renewal that also edits a label: the renewal is acknowledged, the label stored", write{managerB, nil, stored.Add(2500 * time.Millisecond), func(old, obj map[string]any) {
			renewAt(stored.Add(2*time.Second))(old, obj)
			obj["metadata"].(map[string]any)["labels"] = map[string]any{"x": "y"}
		}}, true},
		{"another manager's renewal in a form typed clients cannot read is left to validation (where CEL sees it as written)", write{managerB, nil, stored.Add(2500 * time.Millisecond), func(_, obj map[string]any) {
			obj["spec"].(map[string]any)["renewTime"] = stored.Add(2 * time.Second).Format(time.RFC3339)
		}}, false},
		{"a manager's early renewal with no designation recorded is coalesced (it is the rightful renewer)", write{managerB, nil, stored.Add(2500 * time.Millisecond), func(old, obj map[string]any) {
			renewAt(stored.Add(2*time.Second))(old, obj)
			delete(old["metadata"].(map[string]any), "annotations")
			delete(obj["metadata"].(map[string]any), "annotations")
		}}, true},
		{"another manager's late renewal with the designation recorded but stale is stored", write{managerB, nil, stored.Add(18 * time.Second), renewAt(stored.Add(18 * time.Second))}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old, obj := mclWrite(stored)
			c.w.edit(old, obj)
			mfEntry(obj, 0)["time"] = c.w.at.Truncate(time.Second).Format(time.RFC3339) // the API server's stamp
			req := map[string]any{"operation": "UPDATE", "namespace": sampleNS, "name": "kcc-leader",
				"resource":   map[string]any{"group": "multicluster.core.cnrm.cloud.google.com", "version": "v1alpha1", "resource": "multiclusterleases"},
				"userInfo":   map[string]any{"username": c.w.user, "groups": toAny(c.w.groups)},
				"operation2": nil}
			delete(req, "operation2")
			v, _, err := setBack.Eval(map[string]any{"request": req, "oldObject": old, "object": obj})
			if err != nil {
				t.Fatalf("evaluating the policy's condition: %v", err)
			}
			inAPIServer := v.Value() == true

			decode := func(m map[string]any) *leaseobject.Object {
				data, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				o, err := leaseobject.DecodeJSON(leaseobject.MultiClusterLeases, data)
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			pr := &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Update,
				Caller: leaseobject.Caller{Username: c.w.user, Groups: c.w.groups}, Old: decode(old), New: decode(obj), Now: c.w.at}
			inWebhook := policy.Coalesce(p, pr) || policy.Acknowledge(p, pr)
			if inAPIServer != inWebhook || inAPIServer != c.want {
				t.Errorf("set back in the API server %v, by the webhook %v; want %v", inAPIServer, inWebhook, c.want)
			}
		})
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// A renewal the MutatingAdmissionPolicy acknowledged (the object as stored
// but for the API server's new stamp) reaches no webhook: not the mutating
// one, which has nothing to do for a write that changes nothing, nor the
// validating ones (their exact no-op test). Where the webhook coalesces
// (--coalesce webhook, clusters without MutatingAdmissionPolicy) the
// mutating webhook is still called for such a write, as before.
func TestAnAcknowledgedRenewalCallsNoWebhook(t *testing.T) {
	p := samplePolicy(t)
	req, old, obj := acknowledgedRenewal()
	vars := map[string]any{"request": req, "oldObject": old, "object": obj}
	for _, ack := range []bool{false, true} {
		o := Defaults()
		if !ack {
			o.Coalescing = CoalesceInWebhook
		}
		r, err := Render(p, o)
		if err != nil {
			t.Fatal(err)
		}
		called := false
		for _, w := range r.Mutating.Webhooks {
			all := true
			for _, c := range w.MatchConditions {
				v, _, err := program(t, c.Expression).Eval(vars)
				if err != nil {
					t.Fatalf("webhook %s condition %s: %v", w.Name, c.Name, err)
				}
				all = all && v.Value() == true
			}
			called = called || all
		}
		if called == ack {
			t.Errorf("acknowledged in the API server %v: mutating webhook called %v for an acknowledged renewal", ack, called)
		}
		vreq, vold, vobj := acknowledgedRenewalValidated()
		if got := sampleRouter(t).route(vreq, vold, vobj); got != "none" {
			t.Errorf("acknowledged in the API server %v: validating route %q, want none", ack, got)
		}
	}
}

// An acknowledged renewal is most of the writes of a shared
// MultiClusterLease, and every webhook's condition is evaluated on it.
// Only the fail-closed webhook's condition may prove it a no-op (the whole
// object compared, managedFields entry by entry): the fail-open route and
// the mutating webhook each stop at something cheaper (renewTime kept,
// the spec kept). Each costs less, in the API server's CEL cost units,
// than the proof alone; a proof put back into either fails this. The
// fail-closed condition asks the caller, then the proof, and no identity
// question; the mutating webhook's compares the spec before anything else.
func TestAnAcknowledgedRenewalIsProvedANoOpOnce(t *testing.T) {
	// The validating webhooks see it with the stamp reverted, the
	// mutating one with the stamp.
	req, old, obj := acknowledgedRenewalValidated()
	vars := map[string]any{"request": req, "oldObject": old, "object": obj}
	mreq, mold, mobj := acknowledgedRenewal()
	mutatingVars := map[string]any{"request": mreq, "oldObject": mold, "object": mobj}
	cost := func(name, expr string) (uint64, bool) {
		t.Helper()
		in := vars
		if strings.Contains(name, "mutating") || name == "the spec moves" {
			in = mutatingVars
		}
		v, det, err := program(t, expr, cel.EvalOptions(cel.OptTrackCost)).Eval(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return *det.ActualCost(), v.Value() == true
	}
	proof, isNoop := cost("the no-op proof", noopFirstRenewTime())
	if !isNoop {
		t.Fatal("the fixture is no acknowledged renewal: the no-op proof says it changes something")
	}
	r, err := Render(samplePolicy(t), Defaults())
	if err != nil {
		t.Fatal(err)
	}
	closed, taken := cost("the fail-closed webhook", condition(r.Validating.Webhooks[0].MatchConditions, "selected-fail-closed"))
	if taken || closed < proof {
		t.Errorf("the fail-closed webhook's condition: taken %v at cost %d; want not taken, having proved the no-op (cost %d)", taken, closed, proof)
	}
	// Nor does the fail-closed condition ask a no-op whether it changes an
	// identity (a no-op of the object itself changes none): the caller,
	// then the proof.
	identity, _ := cost("the identity change", celexpr.IdentityChange([]leaseobject.Resource{leaseobject.Leases, leaseobject.MultiClusterLeases}))
	if closed >= proof+identity {
		t.Errorf("the fail-closed webhook's condition costs %d, the no-op proof %d and the identity change %d: it asked the no-op about identities", closed, proof, identity)
	}
	// And the mutating webhook asks the spec first: a write that moves
	// no spec is nothing for it, whoever writes it.
	moves, _ := cost("the spec moves", "request.operation != 'UPDATE' || object.?spec != oldObject.?spec")
	if mutating, _ := cost("the mutating webhook", condition(r.Mutating.Webhooks[0].MatchConditions, "may-need-designation")); mutating > moves+2 {
		t.Errorf("the mutating webhook's condition costs %d on an acknowledged renewal, the spec comparison %d: it asked more before the spec", mutating, moves)
	}
	t.Logf("the fail-closed condition: cost %d (the no-op proof %d, the identity change %d)", closed, proof, identity)
	for name, expr := range map[string]string{
		"the fail-open route":  condition(r.Validating.Webhooks[1].MatchConditions, "selected-and-changed"),
		"the mutating webhook": condition(r.Mutating.Webhooks[0].MatchConditions, "may-need-designation"),
	} {
		c, taken := cost(name, expr)
		if taken || c >= proof {
			t.Errorf("%s's condition: taken %v at cost %d; want not taken, at less than the no-op proof's %d", name, taken, c, proof)
		}
		t.Logf("%s: cost %d (the no-op proof: %d; the fail-closed condition: %d)", name, c, proof, closed)
	}
}

// acknowledgedRenewal is another manager's renewal of the sample's shared
// MultiClusterLease as the MutatingAdmissionPolicy leaves it: the stored
// object but for the API server's new stamp, as the mutating webhooks see
// it.
func acknowledgedRenewal() (req, old, obj map[string]any) {
	stored := time.Date(2026, 12, 5, 6, 0, 10, 123456000, time.UTC)
	old, obj = mclWrite(stored)
	mfEntry(obj, 0)["time"] = stored.Add(2500 * time.Millisecond).Truncate(time.Second).Format(time.RFC3339)
	req = map[string]any{"operation": "UPDATE", "namespace": sampleNS, "name": "kcc-leader",
		"resource": map[string]any{"group": "multicluster.core.cnrm.cloud.google.com", "version": "v1alpha1", "resource": "multiclusterleases"},
		"userInfo": map[string]any{"username": managerB}}
	return req, old, obj
}

// acknowledgedRenewalValidated is the same write as the validating
// webhooks see it: the API server has reverted the stamp of a write that
// changes nothing else (IgnoreManagedFieldsTimestampsTransformer, just
// before validating admission), so it is the stored object.
func acknowledgedRenewalValidated() (req, old, obj map[string]any) {
	req, old, _ = acknowledgedRenewal()
	_, obj = mclWrite(time.Date(2026, 12, 5, 6, 0, 10, 123456000, time.UTC))
	return req, old, obj
}
