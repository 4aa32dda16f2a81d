package vap

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// Identities of the generated cases: the corpus policy's managers,
// operators, status writers and strangers, with and without pods.
var generatedCallers = []leaseobject.Caller{
	{Username: "user:mgr-a", PodName: "pod"},
	{Username: "user:mgr-a", PodName: "pod-2"},
	{Username: "user:mgr-a"},
	{Username: "user:mgr-b", PodName: "pod-b"},
	{Username: "user:mgr-fixed"},
	{Username: "svc:writer"},
	{Username: "user:stranger"},
	{Username: "user:op"},
	{Username: "user:someone", Groups: []string{"system:authenticated", "ops"}},
	{Username: "user:mcl-ctrl"},
	{Username: "user:ctrl-2", Groups: []string{"mcl-controllers"}},
	{Username: "user:a"},
	{Username: "user:b"},
	{Username: "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a", PodName: "cnrm-controller-manager-abc-0"},
	{Username: "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b", PodName: "cnrm-controller-manager-def-0"},
	{Username: "system:serviceaccount:cnrm-system:other", PodName: "other-0"},
	{Username: "system:serviceaccount:multiclusterlease-system:default"},
	{Username: "system:serviceaccount:configconnector-operator-system:configconnector-operator"},
}

var (
	generatedHolders = []string{"", "h1", "h2", "pod", "pod_1", "pod-2_9", "pod-b", "user:mgr-a", "user:mgr-b",
		"cnrm-controller-manager-abc-0_3f2a9c", "cnrm-controller-manager-def-0_1"}
	generatedNames = []string{"l", "l", "l", "lease-a", "lease-b", "kcc-leader", "kcc-leader-team-a", "kcc-leader-team-b", "special-1", "other"}
)

// generatedCases are n writes drawn from seed: every rule's namespace, each
// kind of write (creates, renewals, takeovers, releases, designation
// changes, durations, times, finalizers, owner references, deletes, status
// writes) by every kind of caller, on stored leases of every age.
func generatedCases(n int, seed uint64) []*parityCase {
	rng := rand.New(rand.NewPCG(seed, seed))
	pick := func(n int) int { return rng.IntN(n) }
	chance := func(p float64) bool { return rng.Float64() < p }
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var namespaces []string
	for _, r := range pol.Rules {
		namespaces = append(namespaces, r.View().Namespaces...)
	}
	var out []*parityCase
	for i := 0; len(out) < n; i++ {
		res := leaseobject.Leases
		if chance(0.5) {
			res = leaseobject.MultiClusterLeases
		}
		ns := namespaces[pick(len(namespaces))]
		name := generatedNames[pick(len(generatedNames))]
		if pol.Select(res, ns, name) == nil {
			continue
		}
		caller := generatedCallers[pick(len(generatedCallers))]
		req := leaseobject.Request{Resource: res, Caller: caller, Now: now}
		designations := []string{"", "user:mgr-a", "user:mgr-b", caller.Username, "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a"}
		object := func() *leaseobject.Object {
			o := &leaseobject.Object{Namespace: ns, Name: name}
			o.Spec.Holder = generatedHolders[pick(len(generatedHolders))]
			if !chance(0.1) {
				ages := []time.Duration{300 * time.Second, 40 * time.Second, 25 * time.Second, 12 * time.Second, 8 * time.Second, 6 * time.Second, 3 * time.Second, 0}
				o.Spec.RenewTime = now.Add(-ages[pick(len(ages))]).Add(time.Duration(pick(1000)) * time.Millisecond)
			}
			o.Spec.LeaseDuration = []time.Duration{0, 10 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second}[pick(5)]
			if res == leaseobject.Leases {
				if !chance(0.1) {
					o.Spec.AcquireTime = now.Add(-time.Duration(60+pick(600)) * time.Second)
				}
				o.Spec.Transitions = int32([]int{0, 1, 5}[pick(3)])
			} else if chance(0.3) {
				o.Spec.RenewDeadline = time.Duration(4+pick(20)) * time.Second
				o.Spec.RetryPeriod = time.Duration(1+pick(10)) * time.Second
			}
			if d := designations[pick(len(designations))]; d != "" || chance(0.1) {
				o.Designated, o.HasDesignation = d, true
			}
			if chance(0.15) {
				o.Finalizers = `["keep"]`
			}
			if chance(0.1) {
				o.OwnerReferences = `[{"name":"owner"}]`
			}
			return o
		}
		switch p := rng.Float64(); {
		case p < 0.2:
			req.Operation = leaseobject.Create
			req.New = object()
		case p < 0.35:
			req.Operation = leaseobject.Delete
			req.Old = object()
		default:
			req.Operation = leaseobject.Update
			req.Old = object()
			nw := *req.Old
			if res == leaseobject.MultiClusterLeases && chance(0.1) {
				req.Subresource = leaseobject.StatusSubresource
			} else {
				for k := 1 + pick(3); k > 0; k-- {
					mutate(&nw, req.Old, &req, pick, chance, designations)
				}
			}
			req.New = &nw
		}
		out = append(out, &parityCase{name: fmt.Sprintf("generated/%03d %s %s %s/%s by %s", len(out), req.Operation, res, ns, name, caller.Username),
			source: "generated", request: req})
	}
	return out
}

// mutate changes one thing of a written object.
func mutate(nw, old *leaseobject.Object, req *leaseobject.Request, pick func(int) int, chance func(float64) bool, designations []string) {
	now := req.Now
	switch pick(11) {
	case 0, 1, 2: // renew
		nw.Spec.RenewTime = now.Add([]time.Duration{-30 * time.Second, -time.Second, 0, time.Second, 5 * time.Second}[pick(5)])
	case 3: // take over
		nw.Spec.Holder = generatedHolders[1+pick(len(generatedHolders)-1)]
		nw.Spec.RenewTime = now
		if chance(0.7) {
			nw.Spec.Transitions = old.Spec.Transitions + 1
		} else {
			nw.Spec.Transitions = old.Spec.Transitions + int32(pick(3)) - 1
		}
		if chance(0.8) {
			nw.Spec.AcquireTime = now
		}
	case 4: // release
		nw.Spec.Holder = ""
		if chance(0.2) {
			nw.Spec.Transitions++
		}
	case 5: // designation
		if d := designations[pick(len(designations))]; d != "" || chance(0.5) {
			nw.Designated, nw.HasDesignation = d, d != ""
		} else {
			nw.Designated, nw.HasDesignation = "", false
		}
	case 6: // durations
		nw.Spec.LeaseDuration = []time.Duration{15 * time.Second, 60 * time.Second, 61 * time.Second, 100000 * time.Second}[pick(4)]
		if req.Resource == leaseobject.MultiClusterLeases && chance(0.5) {
			nw.Spec.RetryPeriod = []time.Duration{2 * time.Second, 61 * time.Second}[pick(2)]
		}
	case 7: // finalizers or owner references
		if chance(0.5) {
			// The MultiClusterLease controller's own, alone and beside
			// another: the one finalizer a status writer may change.
			own := `"` + leaseobject.ControllerFinalizer + `"`
			nw.Finalizers = []string{"", `["keep"]`, `["block"]`, `[` + own + `]`, `["keep",` + own + `]`}[pick(5)]
		} else {
			nw.OwnerReferences = []string{"", `[{"name":"other"}]`}[pick(2)]
		}
	case 8: // clear times
		if req.Resource == leaseobject.Leases && chance(0.5) {
			nw.Spec.AcquireTime = time.Time{}
		} else {
			nw.Spec.RenewTime = time.Time{}
		}
	case 9: // times in the future
		if req.Resource == leaseobject.Leases && chance(0.5) {
			nw.Spec.AcquireTime = now.Add(time.Hour)
		} else {
			nw.Spec.RenewTime = now.Add(10 * time.Second)
		}
	case 10: // count transitions
		if req.Resource == leaseobject.Leases {
			nw.Spec.Transitions = []int32{0, old.Spec.Transitions + 1, 2147483647}[pick(3)]
		}
	}
}
