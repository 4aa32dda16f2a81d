package policy

import (
	"github.com/leaseguard/leaseguard/test/testfixtures"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hardPolicy holds the rules of the hardening cases (docs/security.md).
var hardPolicy = testfixtures.HardeningPolicy

var (
	podB  = leaseobject.Caller{Username: "user:mgr-b", PodName: "pod-b"}
	podA2 = leaseobject.Caller{Username: "user:mgr-a", PodName: "pod-2"}
	op    = leaseobject.Caller{Username: "user:op"}
	ctrl  = leaseobject.Caller{Username: "user:mcl-ctrl"}
)

// in builds an object of the hardening cases: held by pod_1 (podA's pod),
// designated to mgr-a.
func in(res leaseobject.Resource, ns string, opts ...objOpt) *leaseobject.Object {
	return mk(res, ns, "l", append([]objOpt{holder("pod_1"), desig("user:mgr-a")}, opts...)...)
}

func renewWrite(d time.Duration) objOpt {
	return func(o *leaseobject.Object) { o.RenewWrite = t0.Add(d) }
}
func finalizers(f string) objOpt { return func(o *leaseobject.Object) { o.Finalizers = f } }
func ownerRefs(r string) objOpt  { return func(o *leaseobject.Object) { o.OwnerReferences = r } }
func unreadableRenewTime(raw string) objOpt {
	return func(o *leaseobject.Object) {
		o.Spec.RenewTime = time.Time{}
		o.Unreadable = append(o.Unreadable, leaseobject.Unreadable{Field: "spec.renewTime", Raw: raw, Problem: raw + " is not a time"})
	}
}

type hardCase struct {
	name     string
	res      leaseobject.Resource
	op       leaseobject.Operation
	sub      string
	caller   leaseobject.Caller
	old, new *leaseobject.Object
	now      time.Duration
	dryRun   bool
	manager  string
	want     want
	// mcl, when set, is what a MultiClusterLease gets instead (sharedOK).
	mcl    *want
	notice string // substring of Decision.Notice
}

func hardCases(res leaseobject.Resource) []hardCase {
	k := kindOf(res)
	var cs []hardCase
	add := func(c hardCase) {
		c.res = res
		c.name = k + "/" + c.name
		if res == leaseobject.MultiClusterLeases && c.mcl != nil {
			c.want = *c.mcl
		}
		cs = append(cs, c)
	}
	upd, del := leaseobject.Update, leaseobject.Delete

	// I4: releases of a live lease.
	add(hardCase{name: "holder's pod releases", op: upd, caller: podA,
		old: in(res, "hard"), new: in(res, "hard", holder(""), renewAt(1*sec)), now: 1 * sec, want: allow("hard")})
	add(hardCase{name: "sibling pod releases the live lease of another", op: upd, caller: podA2,
		old: in(res, "hard"), new: in(res, "hard", holder(""), renewAt(2*sec)), now: 2 * sec,
		want: denyMsg("hard", InvariantFencing, "leaseguard: rule hard: user:mgr-a may not release the lease of pod_1 on "+k+" hard/l (only the holder or an operator may; held until 2025-01-02T03:04:22Z, expires in 15s)")})
	add(hardCase{name: "operator releases a live lease", op: upd, caller: op,
		old: in(res, "hard"), new: in(res, "hard", holder(""), renewAt(2*sec)), now: 2 * sec, want: allow("hard")})
	add(hardCase{name: "anyone releases an expired lease", op: upd, caller: podA2,
		old: in(res, "hard"), new: in(res, "hard", holder(""), renewAt(30*sec)), now: 30 * sec,
		want: want{verdict: Allow, rule: "hard"}})

	// I4: a DELETE of a live lease releases it for whoever creates it next
	// (issue 36): the same rule as a release.
	add(hardCase{name: "sibling pod deletes the live lease of another", op: del, caller: podA2,
		old: in(res, "hard"), now: 2 * sec,
		want: denyMsg("hard", InvariantFencing, "leaseguard: rule hard: user:mgr-a may not delete the live lease of pod_1 on "+k+" hard/l (only the holder or an operator may; held until 2025-01-02T03:04:22Z, expires in 15s)")})
	add(hardCase{name: "sibling pod deletes the live lease of another as a dry run", op: del, caller: podA2, dryRun: true,
		old: in(res, "hard"), now: 2 * sec,
		want: denySub("hard", InvariantFencing, " may not delete the live lease of pod_1 on ")})
	add(hardCase{name: "holder's pod deletes its live lease", op: del, caller: podA,
		old: in(res, "hard"), now: 2 * sec, want: allow("hard")})
	add(hardCase{name: "operator deletes a live lease", op: del, caller: op,
		old: in(res, "hard"), now: 2 * sec, want: allow("hard")})
	add(hardCase{name: "sibling pod deletes an expired lease", op: del, caller: podA2,
		old: in(res, "hard"), now: 30 * sec, want: allow("hard")})
	add(hardCase{name: "sibling pod deletes a released lease", op: del, caller: podA2,
		old: in(res, "hard", holder("")), now: 2 * sec, want: allow("hard")})
	add(hardCase{name: "another manager's pod deletes: the designation decides first", op: del, caller: podB,
		old: in(res, "hard"), now: 2 * sec,
		want: denyMsg("hard", InvariantDesignatedWriter, "leaseguard: rule hard: user:mgr-b is not the designated manager of "+k+" hard/l (designated: user:mgr-a, stale in 15s)")})
	add(hardCase{name: "status writer deletes a live lease", op: del, caller: ctrl,
		old: in(res, "hard", finalizers(`[`+`"`+leaseobject.ControllerFinalizer+`"`+`]`)), now: 2 * sec,
		want: denySub("hard", InvariantManager, "user:mcl-ctrl is not a manager of "+k+" hard/l")})
	add(hardCase{name: "unreadable stored renewTime: a sibling's delete is judged by the stored write", op: del, caller: podA2,
		old: in(res, "hard", unreadableRenewTime(`"yesterday"`), renewWrite(-5*sec)), now: 2 * sec,
		want: denySub("hard", InvariantFencing, " may not delete the live lease of pod_1 on "+k+" hard/l (only the holder or an operator may; held until 2025-01-02T03:04:17Z, expires in 10s)")})

	// I10: bounds on the declared durations.
	add(hardCase{name: "lease duration beyond the maximum", op: upd, caller: podA,
		old: in(res, "hard"), new: in(res, "hard", leaseDur(math.MaxInt32*sec), renewAt(6*sec)), now: 6 * sec,
		want: denyMsg("hard", InvariantBounds, "leaseguard: rule hard: user:mgr-a sets leaseDurationSeconds 2147483647 on "+k+" hard/l (at most 60 (maxLeaseDuration))")})
	add(hardCase{name: "lease duration at the maximum", op: upd, caller: podA,
		old: in(res, "hard"), new: in(res, "hard", leaseDur(60*sec), renewAt(6*sec)), now: 6 * sec, want: allowRenewal("hard", 6*sec)})

	// I7: times.
	add(hardCase{name: "acquireTime in 2099", op: upd, caller: podA,
		old: in(res, "hard"), new: in(res, "hard", func(o *leaseobject.Object) { o.Spec.AcquireTime = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) }, renewAt(6*sec)), now: 6 * sec,
		want: denySub("hard", InvariantLeaseTimes, " sets an acquireTime in the future on "+k+" hard/l (acquireTime 648644h ahead of the server clock, allowed 2s)")})
	add(hardCase{name: "renewTime cleared while held", op: upd, caller: podA,
		old: in(res, "hard"), new: in(res, "hard", noRenew()), now: 6 * sec,
		want: denyMsg("hard", InvariantLeaseTimes, "leaseguard: rule hard: user:mgr-a clears renewTime of held "+k+" hard/l (a held lease keeps its renewTime)")})
	add(hardCase{name: "renewTime moved backwards", op: upd, caller: podA,
		old: in(res, "hard"), new: in(res, "hard", renewAt(-10*sec)), now: 6 * sec,
		want: denySub("hard", InvariantLeaseTimes, " moves renewTime backwards on ")})

	// I6: judged by the time the API server stored the last renewal.
	add(hardCase{name: "old renewTime written a second after the last stored write", op: upd, caller: podA,
		old: in(res, "hard", renewWrite(5*sec), renewAt(-1*sec)), new: in(res, "hard", renewWrite(6*sec), renewAt(0)), now: 6 * sec,
		want: want{verdict: Deny, rule: "hard", inv: InvariantRenewalRate, code: http.StatusTooManyRequests, retry: 4 * sec, renewal: 1 * sec,
			msg: "leaseguard: rule hard: user:mgr-a renews too often " + k + " hard/l (renewed 1s after the stored renewal, minimum 5s)"},
		mcl: sharedOK("hard", sec)})
	add(hardCase{name: "server write time lags renewTime: renewTime counts", op: upd, caller: podA,
		old: in(res, "hard", renewWrite(-1*sec)), new: in(res, "hard", renewAt(6*sec)), now: 6 * sec, want: allowRenewal("hard", 6*sec)})
	add(hardCase{name: "managedFields time of the last renewal moved backwards", op: upd, caller: podA,
		old: in(res, "hard", renewWrite(5*sec)), new: in(res, "hard", renewWrite(-100*sec), func(o *leaseobject.Object) { o.Finalizers = `["x"]` }), now: 6 * sec,
		want: denyMsg("hard", InvariantLeaseTimes, "leaseguard: rule hard: user:mgr-a rewrites the managedFields time of the last renewal of "+k+" hard/l (the API server records it: 2025-01-02T03:04:10Z)")})
	add(hardCase{name: "label-only write rewinding managedFields", op: upd, caller: podB,
		old: in(res, "hard", renewWrite(5*sec)), new: in(res, "hard", renewWrite(-100*sec)), now: 6 * sec,
		want: denySub("hard", InvariantLeaseTimes, " rewrites the managedFields time of the last renewal of ")})
	add(hardCase{name: "re-acquisition right after a release is a write like any other", op: upd, caller: podA,
		old: in(res, "hard", holder(""), renewWrite(5*sec), renewAt(5*sec)), new: in(res, "hard", holder("pod_2"), renewAt(6*sec), transitions(2), acquireAt(6*sec)), now: 6 * sec,
		want: want{verdict: Deny, rule: "hard", inv: InvariantRenewalRate, code: http.StatusTooManyRequests, retry: 4 * sec, renewal: 1 * sec,
			msg: "leaseguard: rule hard: user:mgr-a writes too often " + k + " hard/l (written 1s after the stored renewal, minimum 5s)"}})

	// I11: finalizers and owner references.
	add(hardCase{name: "non-designated manager adds a finalizer", op: upd, caller: podB,
		old: in(res, "hard"), new: in(res, "hard", finalizers(`["block"]`)), now: 1 * sec,
		want: denyMsg("hard", InvariantMetadata, "leaseguard: rule hard: user:mgr-b may not change finalizers or ownerReferences of "+k+" hard/l (designated: user:mgr-a, stale in 16s)")})
	add(hardCase{name: "non-designated manager adds an owner reference", op: upd, caller: podB,
		old: in(res, "hard"), new: in(res, "hard", ownerRefs(`[{"name":"gone"}]`)), now: 1 * sec,
		want: denySub("hard", InvariantMetadata, " may not change finalizers or ownerReferences of ")})
	add(hardCase{name: "non-designated manager labels the lease", op: upd, caller: podB,
		old: in(res, "hard"), new: in(res, "hard"), now: 1 * sec, want: allow("hard")})
	add(hardCase{name: "designated manager adds a finalizer", op: upd, caller: podA,
		old: in(res, "hard"), new: in(res, "hard", finalizers(`["x"]`)), now: 1 * sec, want: allow("hard")})
	// The status writer (the MultiClusterLease controller) adds and removes
	// its own finalizer, and changes nothing else of the object (issue 41).
	own, mine := `"`+leaseobject.ControllerFinalizer+`"`, `"example.com/mine"`
	swRefused := func(inv Invariant, what string) want {
		if res == leaseobject.Leases {
			return denyMsg("hard", InvariantManager, "leaseguard: rule hard: user:mcl-ctrl is not a manager of lease hard/l (managers: user:mgr-*)")
		}
		return denyMsg("hard", inv, "leaseguard: rule hard: user:mcl-ctrl may not change "+what+" of multiclusterlease hard/l (status writers change only finalizer "+leaseobject.ControllerFinalizer+")")
	}
	swAdmitted := allow("hard")
	if res == leaseobject.Leases {
		swAdmitted = swRefused("", "")
	}
	add(hardCase{name: "status writer adds its finalizer", op: upd, caller: ctrl,
		old: in(res, "hard"), new: in(res, "hard", finalizers(`[`+own+`]`)), now: 1 * sec, want: swAdmitted})
	add(hardCase{name: "status writer adds its finalizer after the designated manager's", op: upd, caller: ctrl,
		old: in(res, "hard", finalizers(`[`+mine+`]`)), new: in(res, "hard", finalizers(`[`+mine+`,`+own+`]`)), now: 1 * sec, want: swAdmitted})
	add(hardCase{name: "status writer removes its finalizer and keeps the designated manager's", op: upd, caller: ctrl,
		old: in(res, "hard", finalizers(`[`+own+`,`+mine+`]`)), new: in(res, "hard", finalizers(`[`+mine+`]`)), now: 1 * sec, want: swAdmitted})
	add(hardCase{name: "status writer replaces the finalizers", op: upd, caller: ctrl,
		old: in(res, "hard", finalizers(`[`+mine+`]`)), new: in(res, "hard", finalizers(`["example.com/never-released"]`)), now: 1 * sec,
		want: swRefused(InvariantMetadata, "finalizers")})
	add(hardCase{name: "status writer drops every finalizer", op: upd, caller: ctrl,
		old: in(res, "hard", finalizers(`[`+own+`,`+mine+`]`)), new: in(res, "hard"), now: 1 * sec,
		want: swRefused(InvariantMetadata, "finalizers")})
	add(hardCase{name: "status writer adds another finalizer beside its own", op: upd, caller: ctrl,
		old: in(res, "hard"), new: in(res, "hard", finalizers(`[`+own+`,"example.com/never-released"]`)), now: 1 * sec,
		want: swRefused(InvariantMetadata, "finalizers")})
	add(hardCase{name: "status writer reorders the other finalizers", op: upd, caller: ctrl,
		old: in(res, "hard", finalizers(`["a.io/x","b.io/y"]`)), new: in(res, "hard", finalizers(`["b.io/y","a.io/x"]`)), now: 1 * sec,
		want: swRefused(InvariantMetadata, "finalizers")})
	add(hardCase{name: "status writer adds an owner reference", op: upd, caller: ctrl,
		old: in(res, "hard"), new: in(res, "hard", ownerRefs(`[{"name":"x"}]`)), now: 1 * sec,
		want: swRefused(InvariantMetadata, "ownerReferences")})
	add(hardCase{name: "status writer labels the object", op: upd, caller: ctrl,
		old: in(res, "hard"), new: in(res, "hard", func(o *leaseobject.Object) { o.Labels = `{"team":"ctrl"}` }), now: 1 * sec,
		want: swRefused(InvariantManager, "labels")})
	add(hardCase{name: "status writer annotates the object beside its finalizer", op: upd, caller: ctrl,
		old: in(res, "hard"), new: in(res, "hard", finalizers(`[`+own+`]`), func(o *leaseobject.Object) { o.Annotations = `{"x":"y"}` }), now: 1 * sec,
		want: swRefused(InvariantManager, "annotations")})
	add(hardCase{name: "status writer sets generateName", op: upd, caller: ctrl,
		old: in(res, "hard"), new: in(res, "hard", func(o *leaseobject.Object) { o.GenerateName = "x-" }), now: 1 * sec,
		want: swRefused(InvariantManager, "generateName")})

	// Stored objects leaseguard cannot read never block operators, status
	// writers or deletion, and the holder renews.
	garbled := unreadableRenewTime(`"yesterday"`)
	if res == leaseobject.MultiClusterLeases {
		add(hardCase{name: "unreadable stored renewTime: status writer removes its finalizer", op: upd, caller: ctrl,
			old: in(res, "hard", garbled, finalizers(`[`+own+`]`)), new: in(res, "hard", garbled), now: 1 * sec, want: allow("hard"), notice: "unreadable spec.renewTime"})
	}
	add(hardCase{name: "unreadable stored renewTime: operator deletes", op: del, caller: op,
		old: in(res, "hard", garbled), now: 1 * sec, want: allow("hard")})
	add(hardCase{name: "unreadable stored renewTime: holder renews", op: upd, caller: podA,
		old: in(res, "hard", garbled, renewWrite(-10*sec)), new: in(res, "hard", renewAt(1*sec)), now: 1 * sec,
		want: allow("hard"), notice: "judged without it"})
	add(hardCase{name: "unreadable stored renewTime: expiry judged by the stored write", op: upd, caller: podB,
		old: in(res, "hard", garbled, renewWrite(-20*sec), desig("")), new: in(res, "hard", garbled, holder("pod-b"), desig(""), transitions(2), acquireAt(1*sec)), now: 1 * sec,
		want: allow("hard"), notice: "unreadable"})
	add(hardCase{name: "unreadable stored renewTime: a live lease stays fenced", op: upd, caller: podB,
		old: in(res, "hard", garbled, renewWrite(-5*sec), desig("")), new: in(res, "hard", garbled, holder("pod-b"), desig(""), transitions(2), acquireAt(1*sec)), now: 1 * sec,
		want: denySub("hard", InvariantFencing, " may not change the holder (pod_1 to pod-b) of ")})

	// Back-off: a losing candidate waits for staleness; people get a 403.
	loser := want{verdict: Deny, rule: "hard", inv: InvariantDesignatedWriter, code: http.StatusTooManyRequests, retry: 16 * sec,
		msg: "leaseguard: rule hard: user:mgr-b is not the designated manager of " + k + " hard/l (designated: user:mgr-a, stale in 16s)"}
	add(hardCase{name: "losing candidate backs off until the designation goes stale", op: upd, caller: podB,
		old: in(res, "hard", holder("pod-b")), new: in(res, "hard", holder("pod-b"), renewAt(1*sec)), now: 1 * sec, want: loser,
		mcl: sharedOK("hard", sec)})
	people := loser
	people.code, people.retry = http.StatusForbidden, 0
	add(hardCase{name: "kubectl gets the 403 at once", op: upd, caller: podB, manager: "kubectl-patch",
		old: in(res, "hard", holder("pod-b")), new: in(res, "hard", holder("pod-b"), renewAt(1*sec)), now: 1 * sec, want: people,
		mcl: sharedOK("hard", sec)})
	add(hardCase{name: "a dry run gets the 403 at once", op: upd, caller: podB, dryRun: true,
		old: in(res, "hard", holder("pod-b")), new: in(res, "hard", holder("pod-b"), renewAt(1*sec)), now: 1 * sec, want: people,
		mcl: sharedOK("hard", sec)})

	// Messages stay readable whatever the stored object holds.
	add(hardCase{name: "far-future stored renewTime is named by date", op: upd, caller: podB,
		old: in(res, "plain", renewAt(200*time.Hour)), new: in(res, "plain", holder("pod-b"), renewAt(201*time.Hour), transitions(2), acquireAt(time.Hour)), now: 1 * sec,
		want: denyMsg("plain", InvariantFencing, "leaseguard: rule plain: user:mgr-b may not change the holder (pod_1 to pod-b) of "+k+" plain/l (held until 2025-01-10T11:04:22Z, expires at 2025-01-10T11:04:22Z)")})
	add(hardCase{name: "right-to-left override in a holder is escaped", op: upd, caller: podB,
		old: in(res, "plain", holder("evil\u202eredloh")), new: in(res, "plain", holder("pod-b"), renewAt(1*sec), transitions(2), acquireAt(1*sec)), now: 1 * sec,
		want: denySub("plain", InvariantFencing, `(evil\u202eredloh to pod-b)`)})
	return cs
}

func TestHardening(t *testing.T) {
	p := mustCompile(t, hardPolicy)
	for _, res := range bothResources {
		for _, c := range hardCases(res) {
			t.Run(c.name, func(t *testing.T) {
				req := &leaseobject.Request{Resource: c.res, Operation: c.op, Subresource: c.sub, Caller: c.caller, Old: c.old, New: c.new,
					Now: t0.Add(c.now), DryRun: c.dryRun, FieldManager: c.manager}
				simulateServerStamp(req)
				d := Decide(p, req)
				checkDecision(t, &d, c.caller.Username, c.want)
				if !strings.Contains(d.Notice, c.notice) || (c.notice == "" && d.Notice != "") {
					t.Errorf("Notice %q, want it to contain %q", d.Notice, c.notice)
				}
			})
		}
	}
}

// simulateServerStamp sets, as the API server does before admission, the
// managedFields time of the renewTime's owner on the written object: now, when
// the write changes renewTime, else the stored time; a case that sets it
// itself (to rewind it) keeps its value.
func simulateServerStamp(req *leaseobject.Request) {
	if req.Old == nil || req.New == nil || !req.New.RenewWrite.IsZero() {
		return
	}
	req.New.RenewWrite = req.Old.RenewWrite
	if !req.New.Spec.RenewTime.Equal(req.Old.Spec.RenewTime) {
		req.New.RenewWrite = req.Now.Truncate(time.Second)
	}
}

func TestTransitionsCountOnlyAcquisitions(t *testing.T) {
	p := mustCompile(t, hardPolicy)
	cases := []struct {
		name     string
		old, new *leaseobject.Object
		want     string // substring of the denial, "" for an allow
	}{
		{"rewound by the holder", in(leaseobject.Leases, "plain", transitions(6)), in(leaseobject.Leases, "plain", transitions(0), renewAt(6*sec)),
			"changes leaseTransitions (6 to 0) without a new holder on lease plain/l (leaseTransitions changes only on acquisition)"},
		{"raised to the maximum by the holder", in(leaseobject.Leases, "plain"), in(leaseobject.Leases, "plain", transitions(math.MaxInt32), renewAt(6*sec)),
			"changes leaseTransitions (1 to 2147483647) without a new holder"},
		{"changed on release", in(leaseobject.Leases, "plain"), in(leaseobject.Leases, "plain", holder(""), transitions(5), renewAt(6*sec)),
			"changes leaseTransitions (1 to 5) on release of lease plain/l (a release keeps leaseTransitions)"},
		{"kept on release", in(leaseobject.Leases, "plain"), in(leaseobject.Leases, "plain", holder(""), renewAt(6*sec)), ""},
		{"counted on acquisition of an expired lease", in(leaseobject.Leases, "plain"), in(leaseobject.Leases, "plain", holder("x"), transitions(2), acquireAt(20*sec), renewAt(20*sec)), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := 6 * sec
			if c.new.Spec.Holder == "x" {
				now = 20 * sec
			}
			d := Decide(p, &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: mgrA, Old: c.old, New: c.new, Now: t0.Add(now)})
			if c.want == "" {
				if d.Verdict != Allow {
					t.Fatalf("denied: %s", d.Message)
				}
				return
			}
			if d.Verdict != Deny || d.Invariant != InvariantFencing || !strings.Contains(d.Message, c.want) {
				t.Fatalf("decision %v %s %q, want an I4 denial containing %q", d.Verdict, d.Invariant, d.Message, c.want)
			}
		})
	}
	create := Decide(p, &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Create, Caller: mgrA, New: mk(leaseobject.Leases, "plain", "l", transitions(math.MaxInt32)), Now: t0})
	if create.Verdict != Deny || !strings.Contains(create.Message, "creates with leaseTransitions 2147483647 lease plain/l (leaves no room to count the next acquisition)") {
		t.Errorf("create with the maximum count: %v %q", create.Verdict, create.Message)
	}
}

func TestCoalesce(t *testing.T) {
	p := mustCompile(t, hardPolicy)
	renewal := func(ns string, caller leaseobject.Caller, advance time.Duration, opts ...objOpt) *leaseobject.Request {
		old := mk(leaseobject.Leases, ns, "l", holder("h1"), desig("user:mgr-a"))
		nw := mk(leaseobject.Leases, ns, "l", append([]objOpt{holder("h1"), desig("user:mgr-a"), renewAt(advance)}, opts...)...)
		return &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: caller, Old: old, New: nw, Now: t0.Add(advance)}
	}
	if got := p.Rules[1].CoalesceInterval(); got != 7*sec {
		t.Fatalf("coalesceRenewals auto = %v, want 7s for client-go's timings and a 2s clock skew", got)
	}
	cases := []struct {
		name string
		req  *leaseobject.Request
		want bool
	}{
		{"designated holder renews 2s after the stored renewal", renewal("coalesce", mgrA, 2*sec), true},
		{"6.999s after", renewal("coalesce", mgrA, 7*sec-time.Millisecond), true},
		{"at the interval the renewal is stored", renewal("coalesce", mgrA, 7*sec), false},
		{"renewTime moved backwards is left to validation", renewal("coalesce", mgrA, -time.Second), false},
		{"another manager's renewal is left to validation", renewal("coalesce", mgrB, 2*sec), false},
		{"a stranger's renewal is left to validation", renewal("coalesce", stranger, 2*sec), false},
		{"a renewal that changes another field is stored", renewal("coalesce", mgrA, 2*sec, leaseDur(20*sec)), false},
		{"a renewal that changes the finalizers is stored", renewal("coalesce", mgrA, 2*sec, finalizers(`["x"]`)), false},
		{"a rule without coalesceRenewals stores every renewal", renewal("plain", mgrA, 2*sec), false},
		{"a holder change is never coalesced", renewal("coalesce", mgrA, 2*sec, holder("h2")), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Coalesce(p, c.req); got != c.want {
				t.Fatalf("Coalesce = %v, want %v", got, c.want)
			}
		})
	}
}

func TestCoalescingBoundsTheRateLimit(t *testing.T) {
	_, errs := compileYAML(t, `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: r
  resources: [leases]
  managers: [alice]
  coalesceRenewals: 7s
  minRenewInterval: 6s
`)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `rules[0].minRenewInterval: Invalid value: "6s": would refuse renewals that coalescing stores: they come coalesceRenewals (7s) apart, which with clockSkew 2s may look like 5s; use at most 5s or "auto"`) {
		t.Fatalf("errors %v", errs)
	}
	_, errs = compileYAML(t, `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: r
  resources: [leases]
  managers: [alice]
  coalesceRenewals: 8s
`)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `rules[0].coalesceRenewals: Invalid value: "8s": followers of clients with leaseDuration 15s, renewDeadline 10s, retryPeriod 2s would think the lease expired`) {
		t.Fatalf("errors %v", errs)
	}
}

func TestDesignateWithGenerateName(t *testing.T) {
	p := mustCompile(t, hardPolicy)
	nw := &leaseobject.Object{Namespace: "hard", GenerateName: "kcc-", Spec: leaseobject.Spec{Holder: "pod_1", RenewTime: t0}}
	user, ok := Designate(p, &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Create, Caller: podA, New: nw, Now: t0})
	if !ok || user != "user:mgr-a" {
		t.Fatalf("Designate = %q %v, want the caller stamped on a generateName create", user, ok)
	}
}

// Designation decides who writes, never who leads: the renewals of a shared
// MultiClusterLease by the managers that are not designated are answered
// success without being stored, while the designated writer's lease is
// fresh (docs/multicluster.md).
func TestAcknowledge(t *testing.T) {
	p := mustCompile(t, hardPolicy+`- name: fixed
  resources: [multiclusterleases]
  namespaces: [fixed]
  managers: ["user:mgr-*"]
  designation: "user:mgr-a"
- name: annotated
  resources: [multiclusterleases]
  namespaces: [annotated]
  managers: ["user:mgr-*"]
  designation: annotation
`)
	renewal := func(res leaseobject.Resource, ns string, caller leaseobject.Caller, at time.Duration, opts ...objOpt) *leaseobject.Request {
		old := in(res, ns)
		nw := in(res, ns, append([]objOpt{renewAt(at), stampedAt(at)}, opts...)...)
		return &leaseobject.Request{Resource: res, Operation: leaseobject.Update, Caller: caller, Old: old, New: nw, Now: t0.Add(at)}
	}
	untyped := func(o *leaseobject.Object) {
		o.Untyped = []leaseobject.Unreadable{{Field: "spec.renewTime", Raw: `"x"`}}
	}
	ahead := renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec)
	ahead.New.Spec.RenewTime = t0.Add(5 * sec)
	storedUntyped := renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec)
	untyped(storedUntyped.Old)
	undesignated := renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec)
	undesignated.Old.HasDesignation, undesignated.Old.Designated = false, ""
	undesignated.New.HasDesignation, undesignated.New.Designated = false, ""
	status := renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec)
	status.Subresource = leaseobject.StatusSubresource
	cases := []struct {
		name string
		req  *leaseobject.Request
		want bool
	}{
		{"another manager renews while the designation is fresh", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec), true},
		{"another manager renews 1ns before the designation goes stale", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 17*sec), true},
		{"another manager renews once it is stale: stored (and takes over)", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 17*sec+1), false},
		{"another manager with a clock behind the stored renewal", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, -sec), true},
		{"the designated manager renews: coalescing decides", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrA, 2*sec), false},
		{"another manager's pod renews the holder's lease", renewal(leaseobject.MultiClusterLeases, "hard", leaseobject.Caller{Username: "user:mgr-b", PodName: "pod"}, 2*sec), true},
		{"another manager's pod is not the holder's", renewal(leaseobject.MultiClusterLeases, "hard", podB, 2*sec), false},
		{"a stranger renews", renewal(leaseobject.MultiClusterLeases, "coalesce", stranger, 2*sec), false},
		{"an operator renews: stored", renewal(leaseobject.MultiClusterLeases, "hard", op, 2*sec), false},
		{"another manager also changes a lease field", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec, leaseDur(20*sec)), false},
		{"another manager changes the holder", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec, holder("pod_2")), false},
		{"another manager's renewTime is ahead of the clock: validation refuses it", ahead, false},
		{"another manager writes a time typed clients cannot read", renewal(leaseobject.MultiClusterLeases, "coalesce", mgrB, 2*sec, untyped), false},
		{"the stored time is one typed clients cannot read: stored, repaired", storedUntyped, false},
		{"nobody is designated yet: stored (and designated)", undesignated, false},
		{"no designation in the rule", renewal(leaseobject.MultiClusterLeases, "plain", mgrB, 2*sec), false},
		{"a fixed designation: another manager", renewal(leaseobject.MultiClusterLeases, "fixed", mgrB, 2*sec), true},
		{"a fixed designation: the fixed manager", renewal(leaseobject.MultiClusterLeases, "fixed", mgrA, 2*sec), false},
		{"an annotated designation: another manager", renewal(leaseobject.MultiClusterLeases, "annotated", mgrB, 2*sec), true},
		{"a Lease: candidates have identities of their own", renewal(leaseobject.Leases, "coalesce", mgrB, 2*sec), false},
		{"the status subresource", status, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Acknowledge(p, c.req); got != c.want {
				t.Fatalf("Acknowledge = %v, want %v", got, c.want)
			}
			if c.want && c.req.New.Spec.RenewTime.After(c.req.Old.Spec.RenewTime) {
				// What reaches validation unacknowledged (no mutating
				// step) is admitted: the same renewal, stored. (One that
				// moves renewTime back is refused there, I7.)
				if d := Decide(p, c.req); d.Verdict != Allow {
					t.Errorf("Decide of the unacknowledged renewal = %+v, want allow", d)
				}
			}
		})
	}
	if notes := p.AcknowledgementNotes(); len(notes) != 4 || !strings.HasPrefix(notes[0], "rule hard: ") {
		t.Errorf("AcknowledgementNotes = %q, want one for each rule that designates a MultiClusterLease writer", notes)
	}
}

// A write that adds or re-dates a managedFields entry ahead of the server
// clock is refused; one a client left in the past (an operator's, before
// this check) decides nothing (third attack round, docs/security.md).
func TestManagedFieldsTimesAheadOfTheClock(t *testing.T) {
	p := mustCompile(t, hardPolicy)
	entry := func(key string, at time.Duration) leaseobject.ManagedTime {
		ts := t0.Add(at).UTC().Truncate(time.Second)
		return leaseobject.ManagedTime{Key: key, Raw: ts.Format(time.RFC3339), Time: ts}
	}
	times := func(ms ...leaseobject.ManagedTime) objOpt {
		return func(o *leaseobject.Object) { o.ManagedTimes = ms }
	}
	renewer := "kcc\nUpdate\n\ncoordination.k8s.io/v1"
	year := 365 * 24 * time.Hour
	label := func(o *leaseobject.Object) {}
	cases := []struct {
		name     string
		res      leaseobject.Resource
		caller   leaseobject.Caller
		old, new *leaseobject.Object
		now      time.Duration
		want     Verdict
		msg      string
	}{
		{"a sibling pod's label write re-dates the renewer's entry", leaseobject.Leases, podA2,
			in(leaseobject.Leases, "hard", times(entry(renewer, 0))), in(leaseobject.Leases, "hard", label, times(entry(renewer, 10*year))), sec, Deny,
			"leaseguard: rule hard: user:mgr-a dates a managedFields entry ahead of the server clock on lease hard/l (only the API server dates entries)"},
		{"another manager adds an entry dated ahead", leaseobject.MultiClusterLeases, podB,
			in(leaseobject.MultiClusterLeases, "hard", times(entry(renewer, 0))), in(leaseobject.MultiClusterLeases, "hard", times(entry(renewer, 0), entry("x\nUpdate\n\nv1", time.Hour))), sec, Deny,
			"leaseguard: rule hard: user:mgr-b dates a managedFields entry ahead of the server clock on multiclusterlease hard/l (only the API server dates entries)"},
		{"within the clock skew: the server's own stamp", leaseobject.Leases, podA,
			in(leaseobject.Leases, "hard", renewAt(0), times(entry(renewer, 0))), in(leaseobject.Leases, "hard", renewAt(6*sec), times(entry(renewer, 8*sec))), 6 * sec, Allow, ""},
		{"an entry stored ahead and kept as it is", leaseobject.Leases, podA2,
			in(leaseobject.Leases, "hard", times(entry(renewer, year))), in(leaseobject.Leases, "hard", times(entry(renewer, year))), sec, Allow, ""},
		// Seventh attack round: within the skew, every second, with a label
		// so that the write is stored; the rightful renewer's stamps then
		// looked like a clock moving backwards and were refused.
		{"round 7: another manager's label write re-dates the record of the last renewal within the skew", leaseobject.MultiClusterLeases, podB,
			in(leaseobject.MultiClusterLeases, "hard", renewWrite(0), times(entry(renewer, 0))),
			in(leaseobject.MultiClusterLeases, "hard", label, renewWrite(2*sec), times(entry(renewer, 2*sec))), sec, Deny,
			"leaseguard: rule hard: user:mgr-b re-dates the record of the last renewal, ahead of the server clock, on multiclusterlease hard/l (the API server dates it when renewTime is written: record " +
				t0.Add(2*sec).UTC().Format(time.RFC3339) + ", stored " + t0.UTC().Format(time.RFC3339) + ")"},
		{"round 7: a sibling pod moves the record ahead within the skew", leaseobject.Leases, podA2,
			in(leaseobject.Leases, "hard", renewWrite(0), times(entry(renewer, 0))),
			in(leaseobject.Leases, "hard", label, renewWrite(sec), times(entry(renewer, sec))), 500 * time.Millisecond, Deny,
			"leaseguard: rule hard: user:mgr-a re-dates the record of the last renewal, ahead of the server clock, on lease hard/l (the API server dates it when renewTime is written: record " +
				t0.Add(sec).UTC().Format(time.RFC3339) + ", stored " + t0.UTC().Format(time.RFC3339) + ")"},
		{"the record's own writer writes a label: the API server's stamp, not ahead", leaseobject.MultiClusterLeases, podB,
			in(leaseobject.MultiClusterLeases, "hard", renewWrite(0), times(entry(renewer, 0))),
			in(leaseobject.MultiClusterLeases, "hard", label, renewWrite(sec), times(entry(renewer, sec))), 1500 * time.Millisecond, Allow, ""},
		{"the holder renews a lease whose stored record is dated ahead", leaseobject.Leases, podA,
			in(leaseobject.Leases, "hard", renewWrite(year), times(entry(renewer, year))), in(leaseobject.Leases, "hard", renewAt(6*sec), renewWrite(6*sec), times(entry(renewer, 6*sec))), 6 * sec, Allow, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(p, &leaseobject.Request{Resource: c.res, Operation: leaseobject.Update, Caller: c.caller, Old: c.old, New: c.new, Now: t0.Add(c.now)})
			if d.Verdict != c.want || d.Message != c.msg {
				t.Fatalf("Decide = %v %q, want %v %q", d.Verdict, d.Message, c.want, c.msg)
			}
			if c.want == Deny && d.Invariant != InvariantLeaseTimes {
				t.Errorf("invariant %s, want %s", d.Invariant, InvariantLeaseTimes)
			}
		})
	}
}

// A renewal of a lease that has expired by the server's clock (or would
// before the next stored renewal) is never coalesced, whatever its
// renewTime says: coalesced, its holder is told it renewed while another
// manager may take the lease over at once (third attack round).
func TestCoalesceNeverHidesAnExpiredLease(t *testing.T) {
	p := mustCompile(t, hardPolicy)
	renewal := func(advance, now time.Duration) *leaseobject.Request {
		return &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Update, Caller: mgrA,
			Old: in(leaseobject.MultiClusterLeases, "coalesce"), New: in(leaseobject.MultiClusterLeases, "coalesce", renewAt(advance)), Now: t0.Add(now)}
	}
	// coalesceRenewals auto for 15s/10s/2s clients and a 2s clockSkew: 7s.
	for _, c := range []struct {
		name    string
		req     *leaseobject.Request
		coalesc bool
	}{
		{"an early renewal of a fresh lease", renewal(3*sec, 3*sec), true},
		{"a lagging clock's early renewal of an expired lease", renewal(3*sec, 20*sec), false},
		{"one that would expire within the interval", renewal(3*sec, 8*sec), false},
		{"one that outlives the interval by a nanosecond", renewal(3*sec, 8*sec-1), true},
	} {
		if got := Coalesce(p, c.req); got != c.coalesc {
			t.Errorf("%s: Coalesce = %v, want %v", c.name, got, c.coalesc)
		}
	}
}
