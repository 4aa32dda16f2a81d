package policy

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leaseguard/leaseguard/test/testfixtures"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// decidePolicy holds one rule per scenario, each in its own namespace,
// after Config Connector's two rules.
var decidePolicy = testfixtures.KCCPolicy(testfixtures.KCCOptions{
	BoundLeaseManagers:    []string{"system:serviceaccount:cnrm-system:*"},
	BoundLeaseEnforcement: "deny",
	ExtraRules:            decideExtraRules,
})

const decideExtraRules = `- name: auto
  resources: [leases, multiclusterleases]
  namespaces: [team-auto]
  managers: ["user:mgr-*"]
  designation: auto
  operators: ["user:op", "ops"]
  statusWriters: ["user:mcl-ctrl", "mcl-controllers"]
  minRenewInterval: 5s
- name: annot
  resources: [leases, multiclusterleases]
  namespaces: [team-annot]
  managers: ["user:mgr-*"]
  designation: annotation
  operators: ["user:op"]
- name: fixed
  resources: [leases, multiclusterleases]
  namespaces: [team-fixed]
  managers: ["user:mgr-*"]
  designation: "user:mgr-fixed"
  operators: ["user:op"]
- name: fixed-only
  resources: [leases, multiclusterleases]
  namespaces: [team-fixed-only]
  designation: "svc:writer"
- name: open
  resources: [leases, multiclusterleases]
  namespaces: [team-open]
  managers: ["user:mgr-*"]
  minRenewInterval: 5s
- name: podbind
  resources: [leases, multiclusterleases]
  namespaces: [team-pod]
  managers: ["user:mgr-*"]
  holderBinding: pod
- name: userbind
  resources: [leases, multiclusterleases]
  namespaces: [team-user]
  managers: ["user:mgr-*"]
  holderBinding: username
- name: autoiv
  resources: [leases, multiclusterleases]
  namespaces: [team-autoiv]
  managers: ["user:mgr-*"]
  minRenewInterval: auto
- name: autoiv-slow
  resources: [leases, multiclusterleases]
  namespaces: [team-autoiv-slow]
  managers: ["user:mgr-*"]
  minRenewInterval: auto
  assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}
- name: bound
  resources: [leases, multiclusterleases]
  namespaces: [team-bound]
  bind:
    manager: "user:mgr-{id}"
    lease: "lease-{id}"
- name: bound-ns
  resources: [leases, multiclusterleases]
  namespaces: [mns-a, mns-b]
  bind:
    manager: "system:serviceaccount:{mns}:m-{id}"
    namespace: "{mns}"
    lease: "lease-{id}"
- name: warn
  resources: [leases, multiclusterleases]
  namespaces: [team-warn]
  managers: ["user:mgr-*"]
  designation: auto
  minRenewInterval: 5s
  enforcement: warn
- name: audit
  resources: [leases, multiclusterleases]
  namespaces: [team-audit]
  managers: ["user:mgr-*"]
  designation: auto
  minRenewInterval: 5s
  enforcement: audit
- name: mcl-only
  resources: [multiclusterleases]
  namespaces: [team-mcl]
  managers: ["user:mgr-*"]
- name: first
  resources: [leases, multiclusterleases]
  namespaces: [team-first]
  names: ["special-*"]
  managers: ["user:a"]
- name: second
  resources: [leases, multiclusterleases]
  namespaces: [team-first]
  managers: ["user:b"]
`

// Callers.
var (
	mgrA     = leaseobject.Caller{Username: "user:mgr-a", Groups: []string{"system:authenticated"}}
	mgrB     = leaseobject.Caller{Username: "user:mgr-b", Groups: []string{"system:authenticated"}}
	mgrFixed = leaseobject.Caller{Username: "user:mgr-fixed"}
	svcFixed = leaseobject.Caller{Username: "svc:writer"}
	stranger = leaseobject.Caller{Username: "user:stranger", Groups: []string{"system:authenticated"}}
	// strangerManagerGroup has a group that looks like a manager username;
	// managers are matched against the username only.
	strangerManagerGroup = leaseobject.Caller{Username: "user:stranger", Groups: []string{"user:mgr-a"}}
	opUser               = leaseobject.Caller{Username: "user:op"}
	opGroup              = leaseobject.Caller{Username: "user:someone", Groups: []string{"system:authenticated", "ops"}}
	mclCtrl              = leaseobject.Caller{Username: "user:mcl-ctrl"}
	mclGroup             = leaseobject.Caller{Username: "user:ctrl-2", Groups: []string{"mcl-controllers"}}
	podA                 = leaseobject.Caller{Username: "user:mgr-a", PodName: "pod"}
	userA                = leaseobject.Caller{Username: "user:a"}
	userB                = leaseobject.Caller{Username: "user:b"}

	kccA        = leaseobject.Caller{Username: "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:cnrm-system"}, PodName: "cnrm-controller-manager-abc-0"}
	kccOther    = leaseobject.Caller{Username: "system:serviceaccount:cnrm-system:other", PodName: "other-0"}
	kccForeign  = leaseobject.Caller{Username: "system:serviceaccount:other-ns:cnrm-controller-manager-x", PodName: "x-0"}
	kccColon    = leaseobject.Caller{Username: "system:serviceaccount:cnrm-system:cnrm-controller-manager-a:b", PodName: "p"}
	kccMgrA     = leaseobject.Caller{Username: "system:serviceaccount:cnrm-system:cnrm-controller-manager-a"}
	kccMgrB     = leaseobject.Caller{Username: "system:serviceaccount:cnrm-system:cnrm-controller-manager-b"}
	kccMCLCtrl  = leaseobject.Caller{Username: "system:serviceaccount:multiclusterlease-system:default"}
	kccOperator = leaseobject.Caller{Username: "system:serviceaccount:configconnector-operator-system:configconnector-operator"}
)

const kccAHolder = "cnrm-controller-manager-abc-0_3f2a9c"

type want struct {
	verdict Verdict
	rule    string
	inv     Invariant
	code    int32
	retry   time.Duration
	renewal time.Duration
	desig   bool
	// msg, when set, is the exact message.
	msg string
	// sub, when msg is not set, must appear in the message; its prefix is
	// always checked.
	sub string
}

type decideCase struct {
	name   string
	res    leaseobject.Resource
	op     leaseobject.Operation
	sub    string
	caller leaseobject.Caller
	old    *leaseobject.Object
	new    *leaseobject.Object
	now    time.Duration // offset from t0
	want   want
	// mcl, when set, is what a MultiClusterLease gets instead: a plain
	// renewal of one is the cluster's shared candidate renewing, which I2
	// and I6 do not judge (sharedRenewal).
	mcl *want
}

// sharedOK is what a MultiClusterLease's plain renewal gets where a Lease's
// is refused for who sent it or how often.
func sharedOK(rule string, renewal time.Duration) *want {
	w := allowRenewal(rule, renewal)
	return &w
}

func allow(rule string) want { return want{verdict: Allow, rule: rule} }

func allowRenewal(rule string, renewal time.Duration) want {
	return want{verdict: Allow, rule: rule, renewal: renewal}
}

func allowDesig(rule string) want { return want{verdict: Allow, rule: rule, desig: true} }

func denyMsg(rule string, inv Invariant, msg string) want {
	return want{verdict: Deny, rule: rule, inv: inv, code: http.StatusForbidden, msg: msg}
}

func denySub(rule string, inv Invariant, sub string) want {
	return want{verdict: Deny, rule: rule, inv: inv, code: http.StatusForbidden, sub: sub}
}

// rate is an I6 denial of a renewal made elapsed after the stored renewTime
// (by the server clock) under the given minimum interval.
func rate(rule string, msg string, elapsed, interval time.Duration) want {
	return want{verdict: Deny, rule: rule, inv: InvariantRenewalRate, code: http.StatusTooManyRequests,
		retry: interval - elapsed, renewal: elapsed, msg: msg}
}

func genericCases(res leaseobject.Resource) []decideCase {
	k := kindOf(res)
	upd, cre, del := leaseobject.Update, leaseobject.Create, leaseobject.Delete
	var cs []decideCase
	add := func(c decideCase) {
		c.res = res
		c.name = k + "/" + c.name
		if res == leaseobject.MultiClusterLeases && c.mcl != nil {
			c.want = *c.mcl
		}
		cs = append(cs, c)
	}
	obj := func(ns string, opts ...objOpt) *leaseobject.Object { return mk(res, ns, "l", opts...) }

	// --- operators ---
	add(decideCase{name: "operator by username changes holder and designation while fresh", op: upd, caller: opUser,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:op"), holder("h2"), renewAt(10*sec)),
		now: 10 * sec, want: allowDesig("auto")})
	add(decideCase{name: "operator by group deletes while fresh", op: del, caller: opGroup,
		old: obj("team-auto", desig("user:mgr-a")), now: 10 * sec, want: allow("auto")})
	add(decideCase{name: "operator by group moves renewTime backwards", op: upd, caller: opGroup,
		old: obj("team-auto"), new: obj("team-auto", renewAt(-time.Hour)), now: 10 * sec, want: allow("auto")})
	add(decideCase{name: "operator sets the designation in annotation mode", op: upd, caller: opUser,
		old: obj("team-annot"), new: obj("team-annot", desig("user:mgr-a")), now: 10 * sec, want: allowDesig("annot")})
	add(decideCase{name: "operator creates in annotation mode", op: cre, caller: opUser,
		new: obj("team-annot"), now: 10 * sec, want: allow("annot")})

	// --- I1 ---
	i1auto := "leaseguard: rule auto: user:stranger is not a manager of " + k + " team-auto/l (managers: user:mgr-*)"
	add(decideCase{name: "I1 non-manager renewal", op: upd, caller: stranger,
		old: obj("team-auto"), new: obj("team-auto", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("auto", InvariantManager, i1auto)})
	add(decideCase{name: "I1 non-manager create", op: cre, caller: stranger,
		new: obj("team-auto"), now: 10 * sec, want: denyMsg("auto", InvariantManager, i1auto)})
	add(decideCase{name: "I1 non-manager delete", op: del, caller: stranger,
		old: obj("team-auto"), now: 10 * sec, want: denyMsg("auto", InvariantManager, i1auto)})
	add(decideCase{name: "I1 non-manager metadata-only update", op: upd, caller: stranger,
		old: obj("team-auto"), new: obj("team-auto"), now: 10 * sec, want: denyMsg("auto", InvariantManager, i1auto)})
	add(decideCase{name: "I1 group named like a manager does not make a manager", op: upd, caller: strangerManagerGroup,
		old: obj("team-auto"), new: obj("team-auto", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("auto", InvariantManager, i1auto)})

	// --- status writer outside the status subresource (finalizer updates) ---
	// A status writer's reach on the object itself is the MultiClusterLease
	// controller's finalizer; a Lease has no such controller.
	swNotManager := denyMsg("auto", InvariantManager, "leaseguard: rule auto: user:mcl-ctrl is not a manager of "+k+" team-auto/l (managers: user:mgr-*)")
	add(decideCase{name: "status writer finalizer-only update", op: upd, caller: mclCtrl,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), ctrlFinalizer()), now: 10 * sec,
		want: swNotManager, mcl: ptr(allow("auto"))})
	add(decideCase{name: "status writer by group finalizer-only update", op: upd, caller: mclGroup,
		old: obj("team-auto", ctrlFinalizer()), new: obj("team-auto"), now: 10 * sec,
		want: denySub("auto", InvariantManager, "user:ctrl-2 is not a manager of "+k+" team-auto/l"), mcl: ptr(allow("auto"))})
	add(decideCase{name: "status writer changing spec", op: upd, caller: mclCtrl,
		old: obj("team-auto"), new: obj("team-auto", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("auto", InvariantManager, "leaseguard: rule auto: user:mcl-ctrl is not a manager of "+k+" team-auto/l (managers: user:mgr-*)")})
	add(decideCase{name: "status writer changing the designation", op: upd, caller: mclCtrl,
		old: obj("team-auto"), new: obj("team-auto", desig("user:mcl-ctrl")), now: 10 * sec,
		want: denySub("auto", InvariantManager, "is not a manager of "+k+" team-auto/l")})
	add(decideCase{name: "status writer create", op: cre, caller: mclCtrl,
		new: obj("team-auto"), now: 10 * sec, want: denySub("auto", InvariantManager, "is not a manager of")})
	add(decideCase{name: "status writer delete", op: del, caller: mclCtrl,
		old: obj("team-auto"), now: 10 * sec, want: denySub("auto", InvariantManager, "is not a manager of")})

	// --- auto designation: I2 ---
	i2auto := func(caller, staleIn string) string {
		return "leaseguard: rule auto: " + caller + " is not the designated manager of " + k + " team-auto/l (designated: user:mgr-a, stale in " + staleIn + ")"
	}
	add(decideCase{name: "auto first writer creates without annotation", op: cre, caller: mgrB,
		new: obj("team-auto"), now: 10 * sec, want: allow("auto")})
	add(decideCase{name: "auto first writer creates with its own annotation", op: cre, caller: mgrB,
		new: obj("team-auto", desig("user:mgr-b")), now: 10 * sec, want: allowDesig("auto")})
	add(decideCase{name: "auto first writer updates and designates itself", op: upd, caller: mgrA,
		old: obj("team-auto"), new: obj("team-auto", desig("user:mgr-a"), renewAt(10*sec)), now: 10 * sec,
		want: want{verdict: Allow, rule: "auto", desig: true, renewal: 10 * sec}})
	add(decideCase{name: "auto no annotation any manager renews", op: upd, caller: mgrB,
		old: obj("team-auto"), new: obj("team-auto", renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("auto", 10*sec)})
	add(decideCase{name: "auto designated manager renews", op: upd, caller: mgrA,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("auto", 10*sec)})
	add(decideCase{name: "I2 other manager renews while fresh", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignatedWriter, i2auto("user:mgr-b", "7s")),
		mcl:  sharedOK("auto", 10*sec)})
	add(decideCase{name: "I2 other manager 1s before stale", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), renewAt(16*sec)), now: 16 * sec,
		want: denyMsg("auto", InvariantDesignatedWriter, i2auto("user:mgr-b", "1s")),
		mcl:  sharedOK("auto", 16*sec)})
	add(decideCase{name: "I2 other manager 1ns before expiry+skew", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), renewAt(17*sec-1)), now: 17*sec - 1,
		want: denyMsg("auto", InvariantDesignatedWriter, i2auto("user:mgr-b", "1s")),
		mcl:  sharedOK("auto", 17*sec-1)})
	add(decideCase{name: "I2 other manager exactly at expiry+skew", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), renewAt(17*sec)), now: 17 * sec,
		want: denyMsg("auto", InvariantDesignatedWriter, i2auto("user:mgr-b", "0s")),
		mcl:  sharedOK("auto", 17*sec)})
	add(decideCase{name: "I2 other manager 1ns after expiry+skew", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), renewAt(17*sec+1)), now: 17*sec + 1,
		want: allowRenewal("auto", 17*sec+1)})
	add(decideCase{name: "I2 staleness with 30s lease duration", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a"), leaseDur(30*sec)), new: obj("team-auto", desig("user:mgr-a"), leaseDur(30*sec), renewAt(31*sec)), now: 31 * sec,
		want: denyMsg("auto", InvariantDesignatedWriter, i2auto("user:mgr-b", "1s")),
		mcl:  sharedOK("auto", 31*sec)})
	add(decideCase{name: "I2 staleness from creation time without renew/acquire time and default duration", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a"), noRenew(), noAcquire(), leaseDur(0), createdAt(0)),
		new: obj("team-auto", desig("user:mgr-a"), noAcquire(), leaseDur(0), createdAt(0), renewAt(16*sec)), now: 16 * sec,
		want: denyMsg("auto", InvariantDesignatedWriter, i2auto("user:mgr-b", "1s"))})
	add(decideCase{name: "I2 stale from creation time admits other manager", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a"), noRenew(), noAcquire(), leaseDur(0), createdAt(0)),
		new: obj("team-auto", desig("user:mgr-a"), noAcquire(), leaseDur(0), createdAt(0), renewAt(18*sec)), now: 18 * sec,
		want: allow("auto")})
	add(decideCase{name: "I2 other manager deletes while fresh", op: del, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignatedWriter, i2auto("user:mgr-b", "7s"))})
	add(decideCase{name: "I2 other manager deletes when stale", op: del, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), now: 20 * sec, want: allow("auto")})
	add(decideCase{name: "I2 designated manager deletes", op: del, caller: mgrA,
		old: obj("team-auto", desig("user:mgr-a")), now: 10 * sec, want: allow("auto")})
	add(decideCase{name: "metadata-only update by non-designated manager while fresh", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a")), now: 10 * sec,
		want: allow("auto")})

	// --- auto designation: takeover with the annotation (I3) ---
	i3takeover := func(staleIn string) string {
		return "leaseguard: rule auto: user:mgr-b may not take over the designation of " + k + " team-auto/l (designated: user:mgr-a, stale in " + staleIn + ")"
	}
	add(decideCase{name: "I3 takeover while fresh", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-b"), takeover(res, "h2", 10*sec)), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignationChange, i3takeover("7s"))})
	add(decideCase{name: "I3 takeover 1s before stale", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-b"), takeover(res, "h2", 16*sec)), now: 16 * sec,
		want: denyMsg("auto", InvariantDesignationChange, i3takeover("1s"))})
	add(decideCase{name: "I3 takeover exactly at expiry+skew", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-b"), takeover(res, "h2", 17*sec)), now: 17 * sec,
		want: denyMsg("auto", InvariantDesignationChange, i3takeover("0s"))})
	add(decideCase{name: "I3 takeover 1ns after expiry+skew", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-b"), takeover(res, "h2", 17*sec+1)), now: 17*sec + 1,
		want: allowDesig("auto")})
	add(decideCase{name: "I3 designate itself without spec change while fresh", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-b")), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignationChange, i3takeover("7s"))})
	add(decideCase{name: "I3 designate itself without spec change when stale", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-b")), now: 20 * sec,
		want: allowDesig("auto")})
	add(decideCase{name: "I3 designate itself when absent", op: upd, caller: mgrB,
		old: obj("team-auto"), new: obj("team-auto", desig("user:mgr-b")), now: 10 * sec,
		want: allowDesig("auto")})
	add(decideCase{name: "I3 manager designates someone else", op: upd, caller: mgrA,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-b")), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignationChange, "leaseguard: rule auto: user:mgr-a may not designate user:mgr-b for "+k+" team-auto/l (a manager may designate only itself)")})
	add(decideCase{name: "I3 manager designates someone else on create", op: cre, caller: mgrA,
		new: obj("team-auto", desig("user:mgr-b")), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignationChange, "leaseguard: rule auto: user:mgr-a may not designate user:mgr-b for "+k+" team-auto/l (a manager may designate only itself)")})
	add(decideCase{name: "I3 manager designates someone else on a stale object", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-c")), now: 20 * sec,
		want: denySub("auto", InvariantDesignationChange, "may not designate user:mgr-c for "+k+" team-auto/l")})
	add(decideCase{name: "I3 designated manager removes its annotation", op: upd, caller: mgrA,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto"), now: 10 * sec,
		want: allowDesig("auto")})
	add(decideCase{name: "I3 designated manager empties its annotation", op: upd, caller: mgrA,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("")), now: 10 * sec,
		want: allowDesig("auto")})
	i3remove := "leaseguard: rule auto: user:mgr-b may not remove annotation leaseguard.io/designated-manager of " + k + " team-auto/l (designated: user:mgr-a)"
	add(decideCase{name: "I3 other manager removes a fresh designation", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto"), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignationChange, i3remove)})
	add(decideCase{name: "I3 other manager removes a stale designation", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto"), now: 60 * sec,
		want: denyMsg("auto", InvariantDesignationChange, i3remove)})
	add(decideCase{name: "I3 other manager empties the annotation", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("")), now: 10 * sec,
		want: denyMsg("auto", InvariantDesignationChange, i3remove)})

	// --- annotation mode ---
	i2annot := "leaseguard: rule annot: user:mgr-b is not the designated manager of " + k + " team-annot/l (designated: user:mgr-a)"
	i2annotNone := "leaseguard: rule annot: user:mgr-a may not write " + k + " team-annot/l (no designated manager yet: an operator sets annotation leaseguard.io/designated-manager)"
	i3annot := func(caller string) string {
		return "leaseguard: rule annot: " + caller + " may not change annotation leaseguard.io/designated-manager of " + k + " team-annot/l (only operators may: user:op)"
	}
	add(decideCase{name: "annotation designated manager renews", op: upd, caller: mgrA,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot", desig("user:mgr-a"), renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("annot", 10*sec)})
	add(decideCase{name: "annotation no minRenewInterval renews after 1ms", op: upd, caller: mgrA,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot", desig("user:mgr-a"), renewAt(time.Millisecond)), now: time.Millisecond,
		want: allowRenewal("annot", time.Millisecond)})
	// The stored renewTime may be ahead of the server clock (a client clock
	// ahead, within clockSkew): the time since it is clamped at 0.
	add(decideCase{name: "annotation no minRenewInterval renews before the stored renewTime by the server clock", op: upd, caller: mgrA,
		old: obj("team-annot", desig("user:mgr-a"), renewAt(sec)), new: obj("team-annot", desig("user:mgr-a"), renewAt(2*sec)), now: 0,
		want: allowRenewal("annot", 0)})
	add(decideCase{name: "I2 annotation other manager", op: upd, caller: mgrB,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot", desig("user:mgr-a"), renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("annot", InvariantDesignatedWriter, i2annot),
		mcl:  sharedOK("annot", 10*sec)})
	add(decideCase{name: "I2 annotation other manager after expiry (no staleness in annotation mode)", op: upd, caller: mgrB,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot", desig("user:mgr-a"), takeover(res, "h2", 60*sec)), now: 60 * sec,
		want: denyMsg("annot", InvariantDesignatedWriter, i2annot)})
	add(decideCase{name: "I2 annotation other manager deletes", op: del, caller: mgrB,
		old: obj("team-annot", desig("user:mgr-a")), now: 10 * sec, want: denyMsg("annot", InvariantDesignatedWriter, i2annot)})
	add(decideCase{name: "annotation designated manager deletes", op: del, caller: mgrA,
		old: obj("team-annot", desig("user:mgr-a")), now: 10 * sec, want: allow("annot")})
	add(decideCase{name: "I2 annotation absent: manager spec write", op: upd, caller: mgrA,
		old: obj("team-annot"), new: obj("team-annot", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("annot", InvariantDesignatedWriter, i2annotNone),
		mcl:  sharedOK("annot", 10*sec)})
	add(decideCase{name: "I2 annotation absent: manager create", op: cre, caller: mgrA,
		new: obj("team-annot"), now: 10 * sec, want: denyMsg("annot", InvariantDesignatedWriter, i2annotNone)})
	add(decideCase{name: "I2 annotation absent: manager delete", op: del, caller: mgrA,
		old: obj("team-annot"), now: 10 * sec, want: denyMsg("annot", InvariantDesignatedWriter, i2annotNone)})
	add(decideCase{name: "annotation absent: metadata-only update admitted", op: upd, caller: mgrA,
		old: obj("team-annot"), new: obj("team-annot"), now: 10 * sec, want: allow("annot")})
	add(decideCase{name: "annotation other manager metadata-only update", op: upd, caller: mgrB,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot", desig("user:mgr-a")), now: 10 * sec,
		want: allow("annot")})
	add(decideCase{name: "I3 annotation designated manager hands over", op: upd, caller: mgrA,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot", desig("user:mgr-b")), now: 10 * sec,
		want: denyMsg("annot", InvariantDesignationChange, i3annot("user:mgr-a"))})
	add(decideCase{name: "I3 annotation manager designates itself when absent", op: upd, caller: mgrA,
		old: obj("team-annot"), new: obj("team-annot", desig("user:mgr-a")), now: 10 * sec,
		want: denyMsg("annot", InvariantDesignationChange, i3annot("user:mgr-a"))})
	add(decideCase{name: "I3 annotation manager takes over after expiry", op: upd, caller: mgrB,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot", desig("user:mgr-b")), now: 60 * sec,
		want: denyMsg("annot", InvariantDesignationChange, i3annot("user:mgr-b"))})
	add(decideCase{name: "I3 annotation designated manager removes it", op: upd, caller: mgrA,
		old: obj("team-annot", desig("user:mgr-a")), new: obj("team-annot"), now: 10 * sec,
		want: denyMsg("annot", InvariantDesignationChange, i3annot("user:mgr-a"))})
	add(decideCase{name: "I3 annotation manager creates with its own annotation", op: cre, caller: mgrA,
		new: obj("team-annot", desig("user:mgr-a")), now: 10 * sec,
		want: denyMsg("annot", InvariantDesignationChange, i3annot("user:mgr-a"))})

	// --- fixed designation ---
	i2fixed := "leaseguard: rule fixed: user:mgr-a is not the designated manager of " + k + " team-fixed/l (designated: user:mgr-fixed)"
	add(decideCase{name: "fixed manager creates", op: cre, caller: mgrFixed,
		new: obj("team-fixed"), now: 10 * sec, want: allow("fixed")})
	add(decideCase{name: "fixed manager renews", op: upd, caller: mgrFixed,
		old: obj("team-fixed"), new: obj("team-fixed", renewAt(10*sec)), now: 10 * sec, want: allowRenewal("fixed", 10*sec)})
	add(decideCase{name: "fixed manager deletes", op: del, caller: mgrFixed,
		old: obj("team-fixed"), now: 10 * sec, want: allow("fixed")})
	add(decideCase{name: "I2 fixed other manager renews", op: upd, caller: mgrA,
		old: obj("team-fixed"), new: obj("team-fixed", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("fixed", InvariantDesignatedWriter, i2fixed),
		mcl:  sharedOK("fixed", 10*sec)})
	add(decideCase{name: "I2 fixed other manager renews stale lease", op: upd, caller: mgrA,
		old: obj("team-fixed"), new: obj("team-fixed", renewAt(60*sec)), now: 60 * sec,
		want: denyMsg("fixed", InvariantDesignatedWriter, i2fixed),
		mcl:  sharedOK("fixed", 60*sec)})
	add(decideCase{name: "I2 fixed other manager creates", op: cre, caller: mgrA,
		new: obj("team-fixed"), now: 10 * sec, want: denyMsg("fixed", InvariantDesignatedWriter, i2fixed)})
	add(decideCase{name: "I2 fixed other manager deletes", op: del, caller: mgrA,
		old: obj("team-fixed"), now: 10 * sec, want: denyMsg("fixed", InvariantDesignatedWriter, i2fixed)})
	add(decideCase{name: "fixed other manager metadata-only update", op: upd, caller: mgrA,
		old: obj("team-fixed"), new: obj("team-fixed"), now: 10 * sec, want: allow("fixed")})
	add(decideCase{name: "I3 fixed manager sets the annotation", op: upd, caller: mgrFixed,
		old: obj("team-fixed"), new: obj("team-fixed", desig("user:mgr-fixed")), now: 10 * sec,
		want: denyMsg("fixed", InvariantDesignationChange, "leaseguard: rule fixed: user:mgr-fixed may not change annotation leaseguard.io/designated-manager of "+k+" team-fixed/l (only operators may: user:op)")})
	add(decideCase{name: "I1 fixed stranger", op: upd, caller: stranger,
		old: obj("team-fixed"), new: obj("team-fixed", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("fixed", InvariantManager, "leaseguard: rule fixed: user:stranger is not a manager of "+k+" team-fixed/l (managers: user:mgr-*, user:mgr-fixed)")})
	add(decideCase{name: "fixed-only the fixed manager is a manager", op: cre, caller: svcFixed,
		new: obj("team-fixed-only"), now: 10 * sec, want: allow("fixed-only")})
	add(decideCase{name: "I1 fixed-only stranger", op: cre, caller: stranger,
		new: obj("team-fixed-only"), now: 10 * sec,
		want: denyMsg("fixed-only", InvariantManager, "leaseguard: rule fixed-only: user:stranger is not a manager of "+k+" team-fixed-only/l (managers: svc:writer)")})
	add(decideCase{name: "I3 fixed-only without operators", op: upd, caller: svcFixed,
		old: obj("team-fixed-only"), new: obj("team-fixed-only", desig("svc:writer")), now: 10 * sec,
		want: denyMsg("fixed-only", InvariantDesignationChange, "leaseguard: rule fixed-only: svc:writer may not change annotation leaseguard.io/designated-manager of "+k+" team-fixed-only/l (only operators may: none)")})

	// --- I4 fencing ---
	i4 := func(expiresIn string) string {
		return "leaseguard: rule open: user:mgr-b may not change the holder (h1 to h2) of " + k + " team-open/l (held until 2025-01-02T03:04:22Z, expires in " + expiresIn + ")"
	}
	add(decideCase{name: "I4 holder change before expiry", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 10*sec)), now: 10 * sec,
		want: denyMsg("open", InvariantFencing, i4("7s"))})
	add(decideCase{name: "I4 holder change 1s before expiry+skew", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 16*sec)), now: 16 * sec,
		want: denyMsg("open", InvariantFencing, i4("1s"))})
	add(decideCase{name: "I4 holder change exactly at expiry+skew", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 17*sec)), now: 17 * sec,
		want: denyMsg("open", InvariantFencing, i4("0s"))})
	add(decideCase{name: "I4 holder change 1ns after expiry+skew", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 17*sec+1)), now: 17*sec + 1,
		want: allow("open")})
	add(decideCase{name: "I4 holder change long after expiry", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", time.Hour)), now: time.Hour,
		want: allow("open")})
	add(decideCase{name: "I4 expiry uses the stored lease duration", op: upd, caller: mgrB,
		old: obj("team-open", leaseDur(60*sec)), new: obj("team-open", leaseDur(60*sec), takeover(res, "h2", 30*sec)), now: 30 * sec,
		want: denySub("open", InvariantFencing, "(held until 2025-01-02T03:05:07Z, expires in 32s)")})
	add(decideCase{name: "I4 release to empty before expiry", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", holder(""), renewAt(10*sec)), now: 10 * sec,
		want: allow("open")})
	add(decideCase{name: "I4 acquisition from empty before expiry", op: upd, caller: mgrB,
		old: obj("team-open", holder("")), new: obj("team-open", takeover(res, "h2", 10*sec)), now: 10 * sec,
		want: allow("open")})
	add(decideCase{name: "I4 create with a holder", op: cre, caller: mgrB,
		new: obj("team-open", takeover(res, "h2", 10*sec)), now: 10 * sec, want: allow("open")})
	add(decideCase{name: "I4 manager deletes a held lease", op: del, caller: mgrB,
		old: obj("team-open"), now: 10 * sec, want: allow("open")})

	// --- I4 on DELETE: deleting a live lease is releasing it ---
	i4del := func(rule, ns, holder, caller, expires string) string {
		return "leaseguard: rule " + rule + ": " + caller + " may not delete the live lease of " + holder + " on " + k + " " + ns + "/l (only the holder or an operator may; held until 2025-01-02T03:04:22Z, expires in " + expires + ")"
	}
	add(decideCase{name: "I4 pod deletes the live lease of another pod", op: del, caller: podA,
		old: obj("team-pod", holder("other_uuid")), now: 10 * sec,
		want: denyMsg("podbind", InvariantFencing, i4del("podbind", "team-pod", "other_uuid", "user:mgr-a", "7s"))})
	add(decideCase{name: "I4 pod-less caller deletes a live lease", op: del, caller: mgrA,
		old: obj("team-pod", holder("pod_uuid")), now: 10 * sec,
		want: denyMsg("podbind", InvariantFencing, i4del("podbind", "team-pod", "pod_uuid", "user:mgr-a", "7s"))})
	add(decideCase{name: "I4 holder's pod deletes its live lease", op: del, caller: podA,
		old: obj("team-pod", holder("pod_uuid")), now: 10 * sec, want: allow("podbind")})
	add(decideCase{name: "I4 pod deletes another pod's lease 1ns before expiry+skew", op: del, caller: podA,
		old: obj("team-pod", holder("other_uuid")), now: 17*sec - 1,
		want: denyMsg("podbind", InvariantFencing, i4del("podbind", "team-pod", "other_uuid", "user:mgr-a", "1s"))})
	add(decideCase{name: "I4 pod deletes another pod's expired lease", op: del, caller: podA,
		old: obj("team-pod", holder("other_uuid")), now: 17*sec + 1, want: allow("podbind")})
	add(decideCase{name: "I4 pod deletes a released lease", op: del, caller: podA,
		old: obj("team-pod", holder("")), now: 10 * sec, want: allow("podbind")})
	add(decideCase{name: "I4 user deletes the live lease of another user", op: del, caller: mgrA,
		old: obj("team-user", holder("user:mgr-b")), now: 10 * sec,
		want: denyMsg("userbind", InvariantFencing, i4del("userbind", "team-user", "user:mgr-b", "user:mgr-a", "7s"))})
	add(decideCase{name: "I4 user deletes its own live lease", op: del, caller: mgrA,
		old: obj("team-user", holder("user:mgr-a")), now: 10 * sec, want: allow("userbind")})
	add(decideCase{name: "I4 operator deletes another's live lease", op: del, caller: opUser,
		old: obj("team-auto", desig("user:mgr-a"), holder("someone")), now: 10 * sec, want: allow("auto")})

	// --- I5 holder binding ---
	i5pod := func(h string) string {
		return "leaseguard: rule podbind: user:mgr-a writes holder " + h + " of another pod on " + k + " team-pod/l (want pod[_<id>])"
	}
	add(decideCase{name: "I5 pod holder pod_uuid", op: cre, caller: podA,
		new: obj("team-pod", holder("pod_uuid")), now: 10 * sec, want: allow("podbind")})
	add(decideCase{name: "I5 pod holder equals pod name", op: cre, caller: podA,
		new: obj("team-pod", holder("pod")), now: 10 * sec, want: allow("podbind")})
	add(decideCase{name: "I5 pod holder other_uuid", op: cre, caller: podA,
		new: obj("team-pod", holder("other_uuid")), now: 10 * sec, want: denyMsg("podbind", InvariantHolder, i5pod("other_uuid"))})
	add(decideCase{name: "I5 pod holder podx_uuid", op: cre, caller: podA,
		new: obj("team-pod", holder("podx_uuid")), now: 10 * sec, want: denyMsg("podbind", InvariantHolder, i5pod("podx_uuid"))})
	add(decideCase{name: "I5 pod holder pod-uuid", op: cre, caller: podA,
		new: obj("team-pod", holder("pod-uuid")), now: 10 * sec, want: denyMsg("podbind", InvariantHolder, i5pod("pod-uuid"))})
	add(decideCase{name: "I5 pod holder prefix of pod name", op: cre, caller: podA,
		new: obj("team-pod", holder("po")), now: 10 * sec, want: denyMsg("podbind", InvariantHolder, i5pod("po"))})
	add(decideCase{name: "I5 pod no pod name", op: cre, caller: mgrA,
		new: obj("team-pod", holder("pod_uuid")), now: 10 * sec,
		want: denyMsg("podbind", InvariantHolder, "leaseguard: rule podbind: user:mgr-a has no pod-bound token and may not write "+k+" team-pod/l (holderBinding pod needs the authentication.kubernetes.io/pod-name extra)")})
	add(decideCase{name: "I5 pod renewal of own holder", op: upd, caller: podA,
		old: obj("team-pod", holder("pod_uuid")), new: obj("team-pod", holder("pod_uuid"), renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("podbind", 10*sec)})
	add(decideCase{name: "I5 pod renewal of another pod's holder", op: upd, caller: podA,
		old: obj("team-pod", holder("other_uuid")), new: obj("team-pod", holder("other_uuid"), renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("podbind", InvariantHolder, i5pod("other_uuid"))})
	add(decideCase{name: "I5 pod empty holder needs no pod once expired", op: upd, caller: mgrA,
		old: obj("team-pod", holder("pod_uuid")), new: obj("team-pod", holder(""), renewAt(20*sec)), now: 20 * sec,
		want: allow("podbind")})
	add(decideCase{name: "I4 pod-less caller may not release a live lease", op: upd, caller: mgrA,
		old: obj("team-pod", holder("pod_uuid")), new: obj("team-pod", holder(""), renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("podbind", InvariantFencing, "leaseguard: rule podbind: user:mgr-a may not release the lease of pod_uuid on "+kindOf(res)+" team-pod/l (only the holder or an operator may; held until 2025-01-02T03:04:22Z, expires in 7s)")})
	add(decideCase{name: "I5 username holder equals username", op: cre, caller: mgrA,
		new: obj("team-user", holder("user:mgr-a")), now: 10 * sec, want: allow("userbind")})
	add(decideCase{name: "I5 username holder differs", op: cre, caller: mgrA,
		new: obj("team-user", holder("h1")), now: 10 * sec,
		want: denyMsg("userbind", InvariantHolder, "leaseguard: rule userbind: user:mgr-a writes holder h1 that is not its username on "+k+" team-user/l (holder must be the caller's username)")})
	add(decideCase{name: "I5 username holder is another manager", op: upd, caller: mgrA,
		old: obj("team-user", holder("user:mgr-b")), new: obj("team-user", holder("user:mgr-b"), renewAt(10*sec)), now: 10 * sec,
		want: denySub("userbind", InvariantHolder, "writes holder user:mgr-b that is not its username on")})

	// --- I6 renewal rate ---
	// I6 measures the time since the stored renewTime by the server clock
	// (now); how far the written renewTime advances does not matter (I7
	// bounds it). client-go answers a 429 by sleeping Retry-After and sending
	// the very same body again, which must then pass.
	i6 := func(rule, ns, elapsed, minimum string) string {
		return "leaseguard: rule " + rule + ": user:mgr-a renews too often " + k + " " + ns + "/l (renewed " + elapsed + " after the stored renewal, minimum " + minimum + ")"
	}
	add(decideCase{name: "I6 renewal after 2s of 5s", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(2*sec)), now: 2 * sec,
		want: rate("open", i6("open", "team-open", "2s", "5s"), 2*sec, 5*sec),
		mcl:  sharedOK("open", 2*sec)})
	add(decideCase{name: "I6 renewal after 4.5s of 5s", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(4500*time.Millisecond)), now: 4500 * time.Millisecond,
		want: rate("open", i6("open", "team-open", "4.5s", "5s"), 4500*time.Millisecond, 5*sec),
		mcl:  sharedOK("open", 4500*time.Millisecond)})
	add(decideCase{name: "I6 renewal after 1ms of 5s", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(time.Millisecond)), now: time.Millisecond,
		want: rate("open", i6("open", "team-open", "1ms", "5s"), time.Millisecond, 5*sec),
		mcl:  sharedOK("open", time.Millisecond)})
	add(decideCase{name: "I6 client-go retry of a throttled body after Retry-After admitted", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(2*sec)), now: 5 * sec,
		want: allowRenewal("open", 5*sec)})
	add(decideCase{name: "I6 client-go retry of a throttled body too early", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(2*sec)), now: 3 * sec,
		want: rate("open", i6("open", "team-open", "3s", "5s"), 3*sec, 5*sec),
		mcl:  sharedOK("open", 3*sec)})
	add(decideCase{name: "I6 renewTime advanced past the interval, server clock 1ms short of it", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(6*sec)), now: 4999 * time.Millisecond,
		want: rate("open", i6("open", "team-open", "4.999s", "5s"), 4999*time.Millisecond, 5*sec),
		mcl:  sharedOK("open", 5*sec-time.Millisecond)})
	add(decideCase{name: "I6 stored renewTime ahead of the server clock: elapsed 0", op: upd, caller: mgrA,
		old: obj("team-open", renewAt(sec)), new: obj("team-open", renewAt(2*sec)), now: 0,
		want: rate("open", i6("open", "team-open", "0s", "5s"), 0, 5*sec),
		mcl:  sharedOK("open", 0)})
	add(decideCase{name: "I6 stored renewTime 1s ahead, 6s later by the server clock", op: upd, caller: mgrA,
		old: obj("team-open", renewAt(sec)), new: obj("team-open", renewAt(6*sec)), now: 6 * sec,
		want: allowRenewal("open", 5*sec)})
	add(decideCase{name: "I6 renewal after exactly 5s", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(5*sec)), now: 5 * sec,
		want: allowRenewal("open", 5*sec)})
	add(decideCase{name: "I6 renewal after 6s", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(6*sec)), now: 6 * sec,
		want: allowRenewal("open", 6*sec)})
	add(decideCase{name: "I6 same renewTime, other field changed: limited as a write", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", leaseDur(20*sec)), now: 2 * sec,
		want: want{verdict: Deny, rule: "open", inv: InvariantRenewalRate, code: http.StatusTooManyRequests, retry: 3 * sec, renewal: 2 * sec,
			msg: "leaseguard: rule open: user:mgr-a writes too often " + kindOf(res) + " team-open/l (written 2s after the stored renewal, minimum 5s)"}})
	add(decideCase{name: "I6 same renewTime, other field changed after the interval", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", leaseDur(20*sec)), now: 6 * sec,
		want: allow("open")})
	add(decideCase{name: "I6 first renewTime on a lease without one: not a renewal", op: upd, caller: mgrA,
		old: obj("team-open", noRenew()), new: obj("team-open", renewAt(1*sec)), now: 2 * sec,
		want: allow("open")})
	// auto for a 30s lease: half of two thirds of it is 10s, capped at 8s,
	// the most client-go's default timings survive with clockSkew 2s (a
	// Lease cannot declare its renew deadline).
	add(decideCase{name: "I6 auto 30s lease: 7s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewAt(7*sec)), now: 7 * sec,
		want: rate("autoiv", i6("autoiv", "team-autoiv", "7s", "8s"), 7*sec, 8*sec),
		mcl:  sharedOK("autoiv", 7*sec)})
	add(decideCase{name: "I6 auto 30s lease: 7.999s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewAt(7999*time.Millisecond)), now: 7999 * time.Millisecond,
		want: rate("autoiv", i6("autoiv", "team-autoiv", "7.999s", "8s"), 7999*time.Millisecond, 8*sec),
		mcl:  sharedOK("autoiv", 7999*time.Millisecond)})
	add(decideCase{name: "I6 auto 30s lease: 8s admitted", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewAt(8*sec)), now: 8 * sec,
		want: allowRenewal("autoiv", 8*sec)})
	add(decideCase{name: "I6 auto 30s lease: retried body admitted at 8s", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewAt(2*sec)), now: 8 * sec,
		want: allowRenewal("autoiv", 8*sec)})
	// Clients declared slower (assumedClient 60s/40s/5s, at most 41s) get
	// the full 10s for a 30s lease, 20s for a 60s one.
	add(decideCase{name: "I6 auto slow clients 30s lease: 9s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv-slow", leaseDur(30*sec)), new: obj("team-autoiv-slow", leaseDur(30*sec), renewAt(9*sec)), now: 9 * sec,
		want: rate("autoiv-slow", i6("autoiv-slow", "team-autoiv-slow", "9s", "10s"), 9*sec, 10*sec),
		mcl:  sharedOK("autoiv-slow", 9*sec)})
	add(decideCase{name: "I6 auto slow clients 30s lease: 10s admitted", op: upd, caller: mgrA,
		old: obj("team-autoiv-slow", leaseDur(30*sec)), new: obj("team-autoiv-slow", leaseDur(30*sec), renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("autoiv-slow", 10*sec)})
	add(decideCase{name: "I6 auto slow clients 60s lease: 19s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv-slow", leaseDur(60*sec)), new: obj("team-autoiv-slow", leaseDur(60*sec), renewAt(19*sec)), now: 19 * sec,
		want: rate("autoiv-slow", i6("autoiv-slow", "team-autoiv-slow", "19s", "20s"), 19*sec, 20*sec),
		mcl:  sharedOK("autoiv-slow", 19*sec)})
	add(decideCase{name: "I6 auto slow clients 15s lease: 5s admitted", op: upd, caller: mgrA,
		old: obj("team-autoiv-slow"), new: obj("team-autoiv-slow", renewAt(5*sec)), now: 5 * sec,
		want: allowRenewal("autoiv-slow", 5*sec)})
	add(decideCase{name: "I6 auto 15s lease: 4.999s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv"), new: obj("team-autoiv", renewAt(4999*time.Millisecond)), now: 4999 * time.Millisecond,
		want: rate("autoiv", i6("autoiv", "team-autoiv", "4.999s", "5s"), 4999*time.Millisecond, 5*sec),
		mcl:  sharedOK("autoiv", 4999*time.Millisecond)})
	add(decideCase{name: "I6 auto without lease duration: 4s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(0)), new: obj("team-autoiv", leaseDur(0), renewAt(4*sec)), now: 4 * sec,
		want: rate("autoiv", i6("autoiv", "team-autoiv", "4s", "5s"), 4*sec, 5*sec),
		mcl:  sharedOK("autoiv", 4*sec)})
	add(decideCase{name: "I6 auto without lease duration: 5s admitted", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(0)), new: obj("team-autoiv", leaseDur(0), renewAt(5*sec)), now: 5 * sec,
		want: allowRenewal("autoiv", 5*sec)})

	// --- I7 renewTime sanity ---
	add(decideCase{name: "I7 renewTime backwards", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(-sec)), now: 10 * sec,
		want: denyMsg("open", InvariantLeaseTimes, "leaseguard: rule open: user:mgr-a moves renewTime backwards on "+k+" team-open/l (stored renewTime: 2025-01-02T03:04:05Z)")})
	add(decideCase{name: "I7 renewTime backwards by 1us", op: upd, caller: mgrA,
		old: obj("team-open", renewAt(time.Microsecond)), new: obj("team-open"), now: 10 * sec,
		want: denySub("open", InvariantLeaseTimes, "moves renewTime backwards on "+k+" team-open/l (stored renewTime: 2025-01-02T03:04:05.000001Z)")})
	// Renewals that crossed on their way: a millisecond behind the stored
	// one, at the server's clock. Harmless unchecked, so on the fail-open
	// route; a MultiClusterLease's is decided, and refused, by the
	// renewals policy in the API server as shipped (make test-vap counts
	// such refusals).
	add(decideCase{name: "I7 renewTime a millisecond behind the stored one, at the clock", op: upd, caller: mgrA,
		old: obj("team-open", renewAt(10*sec+time.Millisecond)), new: obj("team-open", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("open", InvariantLeaseTimes, "leaseguard: rule open: user:mgr-a moves renewTime backwards on "+k+" team-open/l (stored renewTime: 2025-01-02T03:04:15.001Z)")})
	add(decideCase{name: "I7 renewTime more than skew ahead", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(12*sec+time.Millisecond)), now: 10 * sec,
		want: denyMsg("open", InvariantLeaseTimes, "leaseguard: rule open: user:mgr-a sets a renewTime in the future on "+k+" team-open/l (renewTime 2.001s ahead of the server clock, allowed 2s)")})
	// The renewal interval is the server clock's 10s, not the 12s advance.
	add(decideCase{name: "I7 renewTime exactly skew ahead", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", renewAt(12*sec)), now: 10 * sec,
		want: allowRenewal("open", 10*sec)})
	add(decideCase{name: "I7 create with renewTime in the future", op: cre, caller: mgrA,
		new: obj("team-open", renewAt(13*sec)), now: 10 * sec,
		want: denySub("open", InvariantLeaseTimes, "sets a renewTime in the future on "+k+" team-open/l (renewTime 3s ahead of the server clock, allowed 2s)")})

	// --- I9 bound leases ---
	add(decideCase{name: "I9 bound manager creates its lease", op: cre, caller: mgrA,
		new: mk(res, "team-bound", "lease-a"), now: 10 * sec, want: allow("bound")})
	add(decideCase{name: "I9 bound manager renews its lease", op: upd, caller: mgrA,
		old: mk(res, "team-bound", "lease-a"), new: mk(res, "team-bound", "lease-a", renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("bound", 10*sec)})
	i9 := "leaseguard: rule bound: user:mgr-a may not write " + k + " team-bound/lease-b (bound lease: lease-a)"
	add(decideCase{name: "I9 bound manager creates another's lease", op: cre, caller: mgrA,
		new: mk(res, "team-bound", "lease-b"), now: 10 * sec, want: denyMsg("bound", InvariantBound, i9)})
	add(decideCase{name: "I9 bound manager renews another's lease", op: upd, caller: mgrA,
		old: mk(res, "team-bound", "lease-b"), new: mk(res, "team-bound", "lease-b", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("bound", InvariantBound, i9)})
	add(decideCase{name: "I9 bound manager deletes another's lease", op: del, caller: mgrA,
		old: mk(res, "team-bound", "lease-b"), now: 10 * sec, want: denyMsg("bound", InvariantBound, i9)})
	add(decideCase{name: "I9 bound manager metadata-only update of another's lease", op: upd, caller: mgrA,
		old: mk(res, "team-bound", "lease-b"), new: mk(res, "team-bound", "lease-b"), now: 10 * sec,
		want: denyMsg("bound", InvariantBound, i9)})
	add(decideCase{name: "I9 lease name with the capture as a prefix", op: cre, caller: mgrA,
		new: mk(res, "team-bound", "lease-ab"), now: 10 * sec,
		want: denySub("bound", InvariantBound, "may not write "+k+" team-bound/lease-ab (bound lease: lease-a)")})
	add(decideCase{name: "I9 longer capture writing a shorter lease", op: cre, caller: leaseobject.Caller{Username: "user:mgr-ab"},
		new: mk(res, "team-bound", "lease-a"), now: 10 * sec,
		want: denyMsg("bound", InvariantBound, "leaseguard: rule bound: user:mgr-ab may not write "+k+" team-bound/lease-a (bound lease: lease-ab)")})
	add(decideCase{name: "I1 bound: capture containing ':' is no manager", op: cre, caller: leaseobject.Caller{Username: "user:mgr-a:x"},
		new: mk(res, "team-bound", "lease-a"), now: 10 * sec,
		want: denyMsg("bound", InvariantManager, "leaseguard: rule bound: user:mgr-a:x is not a manager of "+k+" team-bound/lease-a (managers: user:mgr-{id})")})
	add(decideCase{name: "I1 bound: empty capture is no manager", op: cre, caller: leaseobject.Caller{Username: "user:mgr-"},
		new: mk(res, "team-bound", "lease-"), now: 10 * sec,
		want: denySub("bound", InvariantManager, "is not a manager of "+k+" team-bound/lease- (managers: user:mgr-{id})")})

	// --- I9 bound by name and namespace (Config Connector's dedicated
	// manager namespaces) ---
	mnsA := leaseobject.Caller{Username: "system:serviceaccount:mns-a:m-x"}
	add(decideCase{name: "I9 namespace-bound manager creates its lease in its namespace", op: cre, caller: mnsA,
		new: mk(res, "mns-a", "lease-x"), now: 10 * sec, want: allow("bound-ns")})
	add(decideCase{name: "I9 namespace-bound manager renews its lease", op: upd, caller: mnsA,
		old: mk(res, "mns-a", "lease-x"), new: mk(res, "mns-a", "lease-x", renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("bound-ns", 10*sec)})
	add(decideCase{name: "I9 namespace-bound manager creates its lease name in another namespace", op: cre, caller: mnsA,
		new: mk(res, "mns-b", "lease-x"), now: 10 * sec,
		want: denyMsg("bound-ns", InvariantBound, "leaseguard: rule bound-ns: system:serviceaccount:mns-a:m-x may not write "+k+" mns-b/lease-x (bound lease: mns-a/lease-x)")})
	add(decideCase{name: "I9 namespace-bound manager renews another's lease in its namespace", op: upd, caller: mnsA,
		old: mk(res, "mns-a", "lease-y"), new: mk(res, "mns-a", "lease-y", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("bound-ns", InvariantBound, "leaseguard: rule bound-ns: system:serviceaccount:mns-a:m-x may not write "+k+" mns-a/lease-y (bound lease: mns-a/lease-x)")})
	add(decideCase{name: "I9 namespace-bound manager deletes its lease name in another namespace", op: del, caller: mnsA,
		old: mk(res, "mns-b", "lease-x"), now: 10 * sec,
		want: denySub("bound-ns", InvariantBound, "may not write "+k+" mns-b/lease-x (bound lease: mns-a/lease-x)")})
	add(decideCase{name: "I1 namespace-bound: a username with another ':' is no manager", op: cre, caller: leaseobject.Caller{Username: "system:serviceaccount:mns-a:m-x:y"},
		new: mk(res, "mns-a", "lease-x"), now: 10 * sec,
		want: denyMsg("bound-ns", InvariantManager, "leaseguard: rule bound-ns: system:serviceaccount:mns-a:m-x:y is not a manager of "+k+" mns-a/lease-x (managers: system:serviceaccount:{mns}:m-{id})")})

	// --- warn and audit ---
	add(decideCase{name: "warn renewal too often", op: upd, caller: mgrA,
		old: obj("team-warn"), new: obj("team-warn", renewAt(2*sec)), now: 2 * sec,
		want: want{verdict: Warn, rule: "warn", inv: InvariantRenewalRate, renewal: 2 * sec,
			msg: i6("warn", "team-warn", "2s", "5s")},
		mcl: sharedOK("warn", 2*sec)})
	add(decideCase{name: "warn non-manager", op: upd, caller: stranger,
		old: obj("team-warn"), new: obj("team-warn", renewAt(10*sec)), now: 10 * sec,
		want: want{verdict: Warn, rule: "warn", inv: InvariantManager,
			msg: "leaseguard: rule warn: user:stranger is not a manager of " + k + " team-warn/l (managers: user:mgr-*)"}})
	add(decideCase{name: "warn not designated", op: upd, caller: mgrB,
		old: obj("team-warn", desig("user:mgr-a")), new: obj("team-warn", desig("user:mgr-a"), renewAt(10*sec)), now: 10 * sec,
		want: want{verdict: Warn, rule: "warn", inv: InvariantDesignatedWriter,
			msg: "leaseguard: rule warn: user:mgr-b is not the designated manager of " + k + " team-warn/l (designated: user:mgr-a, stale in 7s)"},
		mcl: sharedOK("warn", 10*sec)})
	add(decideCase{name: "warn admitted write is a plain allow", op: upd, caller: mgrA,
		old: obj("team-warn"), new: obj("team-warn", renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("warn", 10*sec)})
	add(decideCase{name: "audit renewal too often", op: upd, caller: mgrA,
		old: obj("team-audit"), new: obj("team-audit", renewAt(2*sec)), now: 2 * sec,
		want: want{verdict: Audit, rule: "audit", inv: InvariantRenewalRate, renewal: 2 * sec,
			msg: i6("audit", "team-audit", "2s", "5s")},
		mcl: sharedOK("audit", 2*sec)})
	add(decideCase{name: "audit not designated", op: del, caller: mgrB,
		old: obj("team-audit", desig("user:mgr-a")), now: 10 * sec,
		want: want{verdict: Audit, rule: "audit", inv: InvariantDesignatedWriter,
			msg: "leaseguard: rule audit: user:mgr-b is not the designated manager of " + k + " team-audit/l (designated: user:mgr-a, stale in 7s)"}})
	add(decideCase{name: "audit takeover while fresh", op: upd, caller: mgrB,
		old: obj("team-audit", desig("user:mgr-a")), new: obj("team-audit", desig("user:mgr-b")), now: 10 * sec,
		want: want{verdict: Audit, rule: "audit", inv: InvariantDesignationChange,
			msg: "leaseguard: rule audit: user:mgr-b may not take over the designation of " + k + " team-audit/l (designated: user:mgr-a, stale in 7s)"}})
	add(decideCase{name: "audit holder change before expiry", op: upd, caller: mgrB,
		old: obj("team-audit"), new: obj("team-audit", takeover(res, "h2", 10*sec)), now: 10 * sec,
		want: want{verdict: Audit, rule: "audit", inv: InvariantFencing,
			msg: "leaseguard: rule audit: user:mgr-b may not change the holder (h1 to h2) of " + k + " team-audit/l (held until 2025-01-02T03:04:22Z, expires in 7s)"}})

	// --- selection ---
	add(decideCase{name: "no rule selects the namespace", op: upd, caller: stranger,
		old: obj("elsewhere"), new: obj("elsewhere", takeover(res, "h2", time.Millisecond)), now: 10 * sec,
		want: allow("")})
	add(decideCase{name: "no rule: delete", op: del, caller: stranger,
		old: obj("elsewhere"), now: 10 * sec, want: allow("")})
	add(decideCase{name: "first rule wins: narrower earlier rule", op: upd, caller: userB,
		old: mk(res, "team-first", "special-1"), new: mk(res, "team-first", "special-1", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("first", InvariantManager, "leaseguard: rule first: user:b is not a manager of "+k+" team-first/special-1 (managers: user:a)")})
	add(decideCase{name: "first rule wins: its manager", op: upd, caller: userA,
		old: mk(res, "team-first", "special-1"), new: mk(res, "team-first", "special-1", renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("first", 10*sec)})
	add(decideCase{name: "later rule for names the first does not select", op: upd, caller: userB,
		old: mk(res, "team-first", "other"), new: mk(res, "team-first", "other", renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("second", 10*sec)})
	add(decideCase{name: "later rule denies the first rule's manager", op: cre, caller: userA,
		new: mk(res, "team-first", "other"), now: 10 * sec,
		want: denyMsg("second", InvariantManager, "leaseguard: rule second: user:a is not a manager of "+k+" team-first/other (managers: user:b)")})
	return cs
}

func leaseOnlyCases() []decideCase {
	res := leaseobject.Leases
	upd, cre, del := leaseobject.Update, leaseobject.Create, leaseobject.Delete
	var cs []decideCase
	add := func(c decideCase) {
		c.res = res
		c.name = "lease/" + c.name
		cs = append(cs, c)
	}
	obj := func(ns string, opts ...objOpt) *leaseobject.Object { return mk(res, ns, "l", opts...) }

	i4count := func(from, to string) string {
		return "leaseguard: rule open: user:mgr-b changes the holder without counting the transition on lease team-open/l (leaseTransitions must go from " + from + " to " + to + ")"
	}
	i4acquire := "leaseguard: rule open: user:mgr-b changes the holder without a new acquireTime on lease team-open/l (set spec.acquireTime to the time of acquisition)"
	add(decideCase{name: "I4 expired takeover with leaseTransitions +0", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 20*sec), transitions(1)), now: 20 * sec,
		want: denyMsg("open", InvariantFencing, i4count("1", "2"))})
	add(decideCase{name: "I4 expired takeover with leaseTransitions +2", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 20*sec), transitions(3)), now: 20 * sec,
		want: denyMsg("open", InvariantFencing, i4count("1", "2"))})
	add(decideCase{name: "I4 expired takeover with leaseTransitions -1", op: upd, caller: mgrB,
		old: obj("team-open", transitions(7)), new: obj("team-open", takeover(res, "h2", 20*sec), transitions(6)), now: 20 * sec,
		want: denyMsg("open", InvariantFencing, i4count("7", "8"))})
	add(decideCase{name: "I4 expired takeover with leaseTransitions +1 from 7", op: upd, caller: mgrB,
		old: obj("team-open", transitions(7)), new: obj("team-open", takeover(res, "h2", 20*sec), transitions(8)), now: 20 * sec,
		want: allow("open")})
	add(decideCase{name: "I4 acquisition from empty without counting", op: upd, caller: mgrB,
		old: obj("team-open", holder("")), new: obj("team-open", takeover(res, "h2", 10*sec), transitions(1)), now: 10 * sec,
		want: denyMsg("open", InvariantFencing, i4count("1", "2"))})
	add(decideCase{name: "I4 expired takeover keeping acquireTime", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 20*sec), acquireAt(-time.Minute)), now: 20 * sec,
		want: denyMsg("open", InvariantFencing, i4acquire)})
	add(decideCase{name: "I4 expired takeover without acquireTime", op: upd, caller: mgrB,
		old: obj("team-open"), new: obj("team-open", takeover(res, "h2", 20*sec), noAcquire()), now: 20 * sec,
		want: denyMsg("open", InvariantFencing, i4acquire)})
	add(decideCase{name: "I4 acquisition from empty without acquireTime", op: upd, caller: mgrB,
		old: obj("team-open", holder(""), noAcquire()), new: obj("team-open", takeover(res, "h2", 10*sec), noAcquire()), now: 10 * sec,
		want: denyMsg("open", InvariantFencing, i4acquire)})
	add(decideCase{name: "I2 staleness from acquireTime without renewTime", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a"), noRenew(), acquireAt(0)),
		new: obj("team-auto", desig("user:mgr-a"), acquireAt(0), renewAt(16*sec)), now: 16 * sec,
		want: denyMsg("auto", InvariantDesignatedWriter, "leaseguard: rule auto: user:mgr-b is not the designated manager of lease team-auto/l (designated: user:mgr-a, stale in 1s)")})
	add(decideCase{name: "I2 stale from acquireTime admits other manager", op: upd, caller: mgrB,
		old: obj("team-auto", desig("user:mgr-a"), noRenew(), acquireAt(0)),
		new: obj("team-auto", desig("user:mgr-a"), acquireAt(0), renewAt(18*sec)), now: 18 * sec,
		want: allow("auto")})
	add(decideCase{name: "I4 release keeps leaseTransitions", op: upd, caller: mgrA,
		old: obj("team-open"), new: obj("team-open", holder(""), renewAt(10*sec)), now: 10 * sec,
		want: allow("open")})

	// Realistic namespace-mode KCC leases (bind + pod binding + auto interval).
	kcc := func(name string, opts ...objOpt) *leaseobject.Object {
		return mk(res, "cnrm-system", name, append([]objOpt{holder(kccAHolder)}, opts...)...)
	}
	add(decideCase{name: "I9 kcc manager creates its bound lease", op: cre, caller: kccA,
		new: kcc("kcc-leader-team-a"), now: 10 * sec, want: allow("kcc-namespace-leases")})
	add(decideCase{name: "I9 kcc manager renews its bound lease after 5s", op: upd, caller: kccA,
		old: kcc("kcc-leader-team-a"), new: kcc("kcc-leader-team-a", renewAt(5*sec)), now: 5 * sec,
		want: allowRenewal("kcc-namespace-leases", 5*sec)})
	add(decideCase{name: "I6 kcc manager renews its bound lease after 3s", op: upd, caller: kccA,
		old: kcc("kcc-leader-team-a"), new: kcc("kcc-leader-team-a", renewAt(3*sec)), now: 3 * sec,
		want: rate("kcc-namespace-leases", "leaseguard: rule kcc-namespace-leases: system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a renews too often lease cnrm-system/kcc-leader-team-a (renewed 3s after the stored renewal, minimum 5s)", 3*sec, 5*sec)})
	add(decideCase{name: "I6 kcc manager's throttled renewal retried after Retry-After", op: upd, caller: kccA,
		old: kcc("kcc-leader-team-a"), new: kcc("kcc-leader-team-a", renewAt(3*sec)), now: 5 * sec,
		want: allowRenewal("kcc-namespace-leases", 5*sec)})
	kccI9 := "leaseguard: rule kcc-namespace-leases: system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a may not write lease cnrm-system/kcc-leader-team-b (bound lease: kcc-leader-team-a)"
	add(decideCase{name: "I9 kcc manager creates another namespace's lease", op: cre, caller: kccA,
		new: kcc("kcc-leader-team-b"), now: 10 * sec, want: denyMsg("kcc-namespace-leases", InvariantBound, kccI9)})
	add(decideCase{name: "I9 kcc manager renews another namespace's lease", op: upd, caller: kccA,
		old: kcc("kcc-leader-team-b"), new: kcc("kcc-leader-team-b", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("kcc-namespace-leases", InvariantBound, kccI9)})
	add(decideCase{name: "I9 kcc manager deletes another namespace's lease", op: del, caller: kccA,
		old: kcc("kcc-leader-team-b"), now: 10 * sec, want: denyMsg("kcc-namespace-leases", InvariantBound, kccI9)})
	kccUnbound := "leaseguard: rule kcc-namespace-leases: system:serviceaccount:cnrm-system:other may not write lease cnrm-system/kcc-leader-team-a (bound to no lease: username does not fit system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns})"
	add(decideCase{name: "I9 managers glob but not the template: create", op: cre, caller: kccOther,
		new: kcc("kcc-leader-team-a"), now: 10 * sec, want: denyMsg("kcc-namespace-leases", InvariantBound, kccUnbound)})
	add(decideCase{name: "I9 managers glob but not the template: delete", op: del, caller: kccOther,
		old: kcc("kcc-leader-team-a"), now: 10 * sec, want: denyMsg("kcc-namespace-leases", InvariantBound, kccUnbound)})
	add(decideCase{name: "I9 template capture with ':' falls back to managers glob", op: cre, caller: kccColon,
		new: kcc("kcc-leader-a"), now: 10 * sec,
		want: denySub("kcc-namespace-leases", InvariantBound, "may not write lease cnrm-system/kcc-leader-a (bound to no lease: username does not fit system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns})")})
	add(decideCase{name: "I1 kcc foreign service account (message truncated)", op: cre, caller: kccForeign,
		new: kcc("kcc-leader-x"), now: 10 * sec,
		want: denySub("kcc-namespace-leases", InvariantManager, " is not a manager of lease cnrm-system/kcc-leader-x (managers: system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}, ")})
	add(decideCase{name: "I5 kcc manager writes another pod's holder", op: cre, caller: kccA,
		new: kcc("kcc-leader-team-a", holder("cnrm-controller-manager-xyz-0_1")), now: 10 * sec,
		// The full message is longer than the limit and is cut.
		want: denySub("kcc-namespace-leases", InvariantHolder, " writes holder cnrm-controller-manager-xyz-0_1 of another pod on lease cnrm-system/kcc-leader-team-a (want cnrm-controller-manager-a")})

	// Leases have no status subresource: such a request is judged as a
	// write of the Lease itself, not by I8.
	add(decideCase{name: "status subresource of a Lease is not I8", op: upd, sub: leaseobject.StatusSubresource, caller: mgrA,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a"), renewAt(10*sec)), now: 10 * sec,
		want: allowRenewal("auto", 10*sec)})

	// A Lease in a namespace only a MultiClusterLease rule selects.
	add(decideCase{name: "no rule for leases in an MCL-only namespace", op: cre, caller: stranger,
		new: obj("team-mcl"), now: 10 * sec, want: allow("")})
	return cs
}

func mclOnlyCases() []decideCase {
	res := leaseobject.MultiClusterLeases
	upd, del := leaseobject.Update, leaseobject.Delete
	var cs []decideCase
	add := func(c decideCase) {
		c.res = res
		c.name = "multiclusterlease/" + c.name
		cs = append(cs, c)
	}
	obj := func(ns string, opts ...objOpt) *leaseobject.Object { return mk(res, ns, "l", opts...) }
	st := leaseobject.StatusSubresource

	// --- I8 ---
	i8 := func(caller string) string {
		return "leaseguard: rule auto: " + caller + " may not write the status of multiclusterlease team-auto/l (status writers: user:mcl-ctrl, mcl-controllers)"
	}
	add(decideCase{name: "I8 designated manager writes status", op: upd, sub: st, caller: mgrA,
		old: obj("team-auto", desig("user:mgr-a")), new: obj("team-auto", desig("user:mgr-a")), now: 10 * sec,
		want: denyMsg("auto", InvariantStatus, i8("user:mgr-a"))})
	add(decideCase{name: "I8 stranger writes status", op: upd, sub: st, caller: stranger,
		old: obj("team-auto"), new: obj("team-auto"), now: 10 * sec,
		want: denyMsg("auto", InvariantStatus, i8("user:stranger"))})
	add(decideCase{name: "I8 status writer writes status", op: upd, sub: st, caller: mclCtrl,
		old: obj("team-auto"), new: obj("team-auto"), now: 10 * sec, want: allow("auto")})
	add(decideCase{name: "I8 status writer by group writes status", op: upd, sub: st, caller: mclGroup,
		old: obj("team-auto"), new: obj("team-auto"), now: 10 * sec, want: allow("auto")})
	add(decideCase{name: "I8 operator writes status", op: upd, sub: st, caller: opUser,
		old: obj("team-auto"), new: obj("team-auto"), now: 10 * sec, want: allow("auto")})
	add(decideCase{name: "I8 rule without status writers", op: upd, sub: st, caller: mgrA,
		old: obj("team-open"), new: obj("team-open"), now: 10 * sec,
		want: denyMsg("open", InvariantStatus, "leaseguard: rule open: user:mgr-a may not write the status of multiclusterlease team-open/l (status writers: none)")})

	// --- I6: auto interval from a declared renew deadline ---
	// (A plain renewal of a MultiClusterLease is not rate limited: these
	// writes also change retryPeriodSeconds.)
	i6auto := func(elapsed, minimum string) string {
		return "leaseguard: rule autoiv: user:mgr-a renews too often multiclusterlease team-autoiv/l (renewed " + elapsed + " after the stored renewal, minimum " + minimum + ")"
	}
	add(decideCase{name: "I6 auto renewDeadlineSeconds 8: 3.999s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv", renewDeadline(8*sec)), new: obj("team-autoiv", renewDeadline(8*sec), renewAt(3999*time.Millisecond), retryPeriod(3*sec)), now: 3999 * time.Millisecond,
		want: rate("autoiv", i6auto("3.999s", "4s"), 3999*time.Millisecond, 4*sec)})
	add(decideCase{name: "I6 auto renewDeadlineSeconds 8: 4s admitted", op: upd, caller: mgrA,
		old: obj("team-autoiv", renewDeadline(8*sec)), new: obj("team-autoiv", renewDeadline(8*sec), renewAt(4*sec)), now: 4 * sec,
		want: allowRenewal("autoiv", 4*sec)})
	// The declared deadline wins over two thirds of the lease duration
	// (which would give 10s for 30s).
	add(decideCase{name: "I6 auto renewDeadlineSeconds 8 with a 30s lease: 3s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec), renewDeadline(8*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewDeadline(8*sec), renewAt(3*sec), retryPeriod(3*sec)), now: 3 * sec,
		want: rate("autoiv", i6auto("3s", "4s"), 3*sec, 4*sec)})
	add(decideCase{name: "I6 auto renewDeadlineSeconds 8 with a 30s lease: retried body admitted at 4s", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec), renewDeadline(8*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewDeadline(8*sec), renewAt(3*sec)), now: 4 * sec,
		want: allowRenewal("autoiv", 4*sec)})
	// A declared deadline of 20s would give 10s; the rule's clients
	// (client-go's defaults, clockSkew 2s) survive at most 8s.
	add(decideCase{name: "I6 auto renewDeadlineSeconds 20: 7s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec), renewDeadline(20*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewDeadline(20*sec), renewAt(7*sec), retryPeriod(3*sec)), now: 7 * sec,
		want: rate("autoiv", i6auto("7s", "8s"), 7*sec, 8*sec)})
	add(decideCase{name: "I6 auto renewDeadlineSeconds 20: 8s admitted", op: upd, caller: mgrA,
		old: obj("team-autoiv", leaseDur(30*sec), renewDeadline(20*sec)), new: obj("team-autoiv", leaseDur(30*sec), renewDeadline(20*sec), renewAt(8*sec)), now: 8 * sec,
		want: allowRenewal("autoiv", 8*sec)})
	add(decideCase{name: "I6 auto slow clients renewDeadlineSeconds 20: 9s denied", op: upd, caller: mgrA,
		old: obj("team-autoiv-slow", leaseDur(30*sec), renewDeadline(20*sec)), new: obj("team-autoiv-slow", leaseDur(30*sec), renewDeadline(20*sec), renewAt(9*sec), retryPeriod(3*sec)), now: 9 * sec,
		want: rate("autoiv-slow", "leaseguard: rule autoiv-slow: user:mgr-a renews too often multiclusterlease team-autoiv-slow/l (renewed 9s after the stored renewal, minimum 10s)", 9*sec, 10*sec)})

	// --- the sample's kcc-mcl rule ---
	kcc := func(opts ...objOpt) *leaseobject.Object { return mk(res, "cnrm-system", "kcc-leader", opts...) }
	a := kccMgrA.Username
	add(decideCase{name: "kcc-mcl designated manager renews", op: upd, caller: kccMgrA,
		old: kcc(desig(a)), new: kcc(desig(a), renewAt(5*sec)), now: 5 * sec,
		want: allowRenewal("kcc-mcl", 5*sec)})
	add(decideCase{name: "kcc-mcl documented I2 message", op: upd, caller: kccMgrB,
		old: kcc(desig(a)), new: kcc(desig(a), renewAt(5*sec), leaseDur(20*sec)), now: 5 * sec,
		want: denyMsg("kcc-mcl", InvariantDesignatedWriter, "leaseguard: rule kcc-mcl: system:serviceaccount:cnrm-system:cnrm-controller-manager-b is not the designated manager of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in 12s)")})
	add(decideCase{name: "kcc-mcl takeover after stale", op: upd, caller: kccMgrB,
		old: kcc(desig(a)), new: kcc(desig(kccMgrB.Username), renewAt(17*sec+1)), now: 17*sec + 1,
		want: want{verdict: Allow, rule: "kcc-mcl", desig: true, renewal: 17*sec + 1}})
	add(decideCase{name: "kcc-mcl I8 manager writes status", op: upd, sub: st, caller: kccMgrB,
		old: kcc(desig(a)), new: kcc(desig(a)), now: 5 * sec,
		want: denyMsg("kcc-mcl", InvariantStatus, "leaseguard: rule kcc-mcl: system:serviceaccount:cnrm-system:cnrm-controller-manager-b may not write the status of multiclusterlease cnrm-system/kcc-leader (status writers: system:serviceaccount:multiclusterlease-system:default)")})
	add(decideCase{name: "kcc-mcl controller writes status", op: upd, sub: st, caller: kccMCLCtrl,
		old: kcc(desig(a)), new: kcc(desig(a)), now: 5 * sec, want: allow("kcc-mcl")})
	add(decideCase{name: "kcc-mcl controller adds its finalizer", op: upd, caller: kccMCLCtrl,
		old: kcc(desig(a)), new: kcc(desig(a), ctrlFinalizer()), now: 5 * sec, want: allow("kcc-mcl")})
	add(decideCase{name: "kcc-mcl controller replaces the finalizers", op: upd, caller: kccMCLCtrl,
		old: kcc(desig(a), func(o *leaseobject.Object) { o.Finalizers = `["example.com/mine"]` }), new: kcc(desig(a), func(o *leaseobject.Object) { o.Finalizers = `["example.com/never-released"]` }), now: 5 * sec,
		want: denyMsg("kcc-mcl", InvariantMetadata, "leaseguard: rule kcc-mcl: system:serviceaccount:multiclusterlease-system:default may not change finalizers of multiclusterlease cnrm-system/kcc-leader (status writers change only finalizer multiclusterlease.core.cnrm.cloud.google.com/finalizer)")})
	add(decideCase{name: "kcc-mcl controller changes spec", op: upd, caller: kccMCLCtrl,
		old: kcc(desig(a)), new: kcc(desig(a), holder("forged")), now: 5 * sec,
		want: denyMsg("kcc-mcl", InvariantManager, "leaseguard: rule kcc-mcl: system:serviceaccount:multiclusterlease-system:default is not a manager of multiclusterlease cnrm-system/kcc-leader (managers: system:serviceaccount:cnrm-system:cnrm-controller-manager-*)")})
	add(decideCase{name: "kcc-mcl operator deletes", op: del, caller: kccOperator,
		old: kcc(desig(a)), now: 5 * sec, want: allow("kcc-mcl")})

	// An MCL in the MCL-only namespace is selected.
	add(decideCase{name: "MCL-only rule selects multiclusterleases", op: upd, caller: stranger,
		old: obj("team-mcl"), new: obj("team-mcl", renewAt(10*sec)), now: 10 * sec,
		want: denyMsg("mcl-only", InvariantManager, "leaseguard: rule mcl-only: user:stranger is not a manager of multiclusterlease team-mcl/l (managers: user:mgr-*)")})
	return cs
}

func allDecideCases() []decideCase {
	var cs []decideCase
	for _, res := range bothResources {
		cs = append(cs, genericCases(res)...)
	}
	cs = append(cs, leaseOnlyCases()...)
	cs = append(cs, mclOnlyCases()...)
	return cs
}

func (c *decideCase) request() *leaseobject.Request {
	return &leaseobject.Request{
		Resource:    c.res,
		Operation:   c.op,
		Subresource: c.sub,
		Caller:      c.caller,
		Old:         c.old,
		New:         c.new,
		Now:         t0.Add(c.now),
	}
}

func TestDecide(t *testing.T) {
	p := mustCompile(t, decidePolicy)
	cases := allDecideCases()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.name] {
			t.Fatalf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(p, c.request())
			checkDecision(t, &d, c.caller.Username, c.want)
		})
	}
	t.Logf("%d Decide cases", len(cases))
}

func checkDecision(t *testing.T, d *Decision, caller string, w want) {
	t.Helper()
	if d.Verdict != w.verdict {
		t.Errorf("Verdict = %v, want %v (message %q)", d.Verdict, w.verdict, d.Message)
	}
	if d.Allowed() != (w.verdict != Deny) {
		t.Errorf("Allowed() = %v for verdict %v", d.Allowed(), d.Verdict)
	}
	if d.Rule != w.rule {
		t.Errorf("Rule = %q, want %q", d.Rule, w.rule)
	}
	if d.Invariant != w.inv {
		t.Errorf("Invariant = %q, want %q", d.Invariant, w.inv)
	}
	if d.Code != w.code {
		t.Errorf("Code = %d, want %d", d.Code, w.code)
	}
	if d.RetryAfter != w.retry {
		t.Errorf("RetryAfter = %v, want %v", d.RetryAfter, w.retry)
	}
	if d.RenewalInterval != w.renewal {
		t.Errorf("RenewalInterval = %v, want %v", d.RenewalInterval, w.renewal)
	}
	if d.DesignationChanged != w.desig {
		t.Errorf("DesignationChanged = %v, want %v", d.DesignationChanged, w.desig)
	}
	if w.verdict == Allow {
		if d.Message != "" {
			t.Errorf("Message = %q, want none for an allow", d.Message)
		}
		return
	}
	checkMessage(t, d.Message)
	if w.msg != "" {
		if d.Message != w.msg {
			t.Errorf("Message =\n  %q\nwant\n  %q", d.Message, w.msg)
		}
		return
	}
	prefix := "leaseguard: rule " + w.rule + ": " + caller + " "
	if !strings.HasPrefix(d.Message, prefix) {
		t.Errorf("Message %q does not start with %q", d.Message, prefix)
	}
	if w.sub == "" {
		t.Fatalf("test case gives neither msg nor sub")
	}
	if !strings.Contains(d.Message, w.sub) {
		t.Errorf("Message %q does not contain %q", d.Message, w.sub)
	}
}

// checkMessage asserts docs/design.md §4's message shape: one line, under 256 bytes.
func checkMessage(t *testing.T, msg string) {
	t.Helper()
	if msg == "" {
		t.Errorf("empty message")
	}
	if len(msg) >= 256 {
		t.Errorf("message is %d bytes, want < 256: %q", len(msg), msg)
	}
	if strings.ContainsAny(msg, "\n\r") {
		t.Errorf("message is not one line: %q", msg)
	}
	if !utf8.ValidString(msg) {
		t.Errorf("message is not valid UTF-8: %q", msg)
	}
	if !strings.HasPrefix(msg, "leaseguard: rule ") {
		t.Errorf("message %q does not start with %q", msg, "leaseguard: rule ")
	}
}

// TestDecideCoversEveryInvariant guards the tables themselves: every
// invariant is exercised with a denial (I10 and I11 in the hardening
// table) and every resource with an allow and a denial.
func TestDecideCoversEveryInvariant(t *testing.T) {
	type key struct {
		res leaseobject.Resource
		inv Invariant
	}
	denied := map[key]bool{}
	allowed := map[leaseobject.Resource]bool{}
	for _, c := range allDecideCases() {
		if c.want.verdict == Deny {
			denied[key{c.res, c.want.inv}] = true
		} else if c.want.verdict == Allow {
			allowed[c.res] = true
		}
	}
	invs := []Invariant{InvariantManager, InvariantDesignatedWriter, InvariantDesignationChange, InvariantFencing,
		InvariantHolder, InvariantRenewalRate, InvariantLeaseTimes, InvariantBound}
	for _, res := range bothResources {
		for _, inv := range invs {
			if !denied[key{res, inv}] {
				t.Errorf("no denial case for %s %s", res, inv)
			}
		}
		if !allowed[res] {
			t.Errorf("no allow case for %s", res)
		}
	}
	if !denied[key{leaseobject.MultiClusterLeases, InvariantStatus}] {
		t.Errorf("no I8 denial case")
	}
	// I10 and I11 are exercised by the hardening table (hardCases), on
	// both resources.
	for _, res := range bothResources {
		hard := map[Invariant]bool{}
		for _, c := range hardCases(res) {
			if c.want.verdict == Deny {
				hard[c.want.inv] = true
			}
		}
		for _, inv := range []Invariant{InvariantBounds, InvariantMetadata} {
			if !hard[inv] {
				t.Errorf("no denial case for %s %s in the hardening table", res, inv)
			}
		}
	}
}

// messageFormat is docs/policy.md's message shape:
// leaseguard: rule <rule>: <caller> <what is wrong> <kind> <namespace>/<name> (<what would be allowed>)
var messageFormat = regexp.MustCompile(`^leaseguard: rule [a-z0-9.-]+: \S+ .+ (lease|multiclusterlease) [^ /]+/[^ /]+ \(.+\)$`)

// TestDenialMessagesFollowDocumentedFormat checks every denial, warning and
// audit message of the Decide table that is not cut for length against the
// documented shape, which ends with what would be allowed in parentheses.
func TestDenialMessagesFollowDocumentedFormat(t *testing.T) {
	p := mustCompile(t, decidePolicy)
	for _, c := range allDecideCases() {
		d := Decide(p, c.request())
		if d.Verdict == Allow || strings.HasSuffix(d.Message, "...") {
			continue
		}
		if !messageFormat.MatchString(d.Message) {
			t.Errorf("%s: message does not follow the documented format: %q", c.name, d.Message)
		}
	}
}

func TestDecideWithoutObject(t *testing.T) {
	p := mustCompile(t, decidePolicy)
	d := Decide(p, &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: stranger, Now: t0})
	if d.Verdict != Allow || d.Rule != "" || d.Message != "" {
		t.Errorf("Decide without objects = %+v, want a plain allow", d)
	}
}

// TestDecideWarnAuditKeepMessage checks that warn and audit turn exactly the
// decision a deny rule would make into an admitted one: same invariant and
// message, no HTTP code, no retry-after.
func TestDecideWarnAuditKeepMessage(t *testing.T) {
	const tmpl = `
apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: r
  resources: [leases, multiclusterleases]
  managers: ["user:mgr-*"]
  designation: auto
  holderBinding: pod
  minRenewInterval: 5s
  enforcement: %s
`
	deny := mustCompile(t, fmt.Sprintf(tmpl, "deny"))
	warn := mustCompile(t, fmt.Sprintf(tmpl, "warn"))
	audit := mustCompile(t, fmt.Sprintf(tmpl, "audit"))
	for _, res := range bothResources {
		reqs := map[string]*leaseobject.Request{
			"I1": {Resource: res, Operation: leaseobject.Update, Caller: stranger, Old: mk(res, "ns", "l"), New: mk(res, "ns", "l", renewAt(sec)), Now: t0.Add(sec)},
			"I2": {Resource: res, Operation: leaseobject.Delete, Caller: mgrB, Old: mk(res, "ns", "l", desig("user:mgr-a")), Now: t0.Add(sec)},
			"I3": {Resource: res, Operation: leaseobject.Update, Caller: mgrB, Old: mk(res, "ns", "l"), New: mk(res, "ns", "l", desig("user:mgr-a")), Now: t0.Add(sec)},
			"I4": {Resource: res, Operation: leaseobject.Update, Caller: podA, Old: mk(res, "ns", "l"), New: mk(res, "ns", "l", takeover(res, "pod_1", sec)), Now: t0.Add(sec)},
			"I5": {Resource: res, Operation: leaseobject.Update, Caller: podA, Old: mk(res, "ns", "l"), New: mk(res, "ns", "l", renewAt(9*sec)), Now: t0.Add(9 * sec)},
			"I6": {Resource: res, Operation: leaseobject.Update, Caller: podA, Old: mk(res, "ns", "l", holder("pod")), New: mk(res, "ns", "l", holder("pod"), renewAt(sec), leaseDur(20*sec)), Now: t0.Add(sec)},
			"I7": {Resource: res, Operation: leaseobject.Update, Caller: podA, Old: mk(res, "ns", "l", holder("pod")), New: mk(res, "ns", "l", holder("pod"), renewAt(-sec)), Now: t0.Add(sec)},
		}
		for inv, req := range reqs {
			t.Run(string(res)+"/"+inv, func(t *testing.T) {
				dd := Decide(deny, req)
				if dd.Verdict != Deny || string(dd.Invariant) != inv || dd.Code == 0 {
					t.Fatalf("deny rule: %+v, want a %s denial", dd, inv)
				}
				if inv == "I6" && (dd.Code != http.StatusTooManyRequests || dd.RetryAfter != 4*sec) {
					t.Errorf("deny rule I6: Code %d RetryAfter %v, want 429 and 4s", dd.Code, dd.RetryAfter)
				}
				for _, m := range []struct {
					p *Policy
					v Verdict
				}{{warn, Warn}, {audit, Audit}} {
					d := Decide(m.p, req)
					if d.Verdict != m.v || d.Invariant != dd.Invariant || d.Message != dd.Message ||
						d.Code != 0 || d.RetryAfter != 0 || d.Rule != "r" || !d.Allowed() {
						t.Errorf("%v rule: %+v, want verdict %v, invariant %s, code 0, no retry, message %q", m.v, d, m.v, dd.Invariant, dd.Message)
					}
				}
			})
		}
	}
}

// TestDenialMessagesHostileValues feeds values the client controls (holder,
// annotation) and long values into denial messages: docs/design.md §4 requires every
// denial to be one line under 256 characters.
func TestDenialMessagesHostileValues(t *testing.T) {
	p := mustCompile(t, decidePolicy)
	long := strings.Repeat("x", 300)
	longUTF8 := strings.Repeat("é", 200) // 2 bytes each: cuts fall inside runes
	longName := strings.Repeat("n", 253)
	cases := []struct {
		name string
		req  *leaseobject.Request
		inv  Invariant
	}{
		{"newline in holder (I5)", &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Create, Caller: podA,
			New: mk(leaseobject.Leases, "team-pod", "l", holder("evil\nholder")), Now: t0.Add(10 * sec)}, InvariantHolder},
		{"newline in holder (I4)", &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Update, Caller: mgrB,
			Old: mk(leaseobject.MultiClusterLeases, "team-open", "l"), New: mk(leaseobject.MultiClusterLeases, "team-open", "l", holder("h2\r\nX-Injected: 1")), Now: t0.Add(10 * sec)}, InvariantFencing},
		{"newline in designation annotation (I3)", &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: mgrA,
			Old: mk(leaseobject.Leases, "team-auto", "l"), New: mk(leaseobject.Leases, "team-auto", "l", desig("user:mgr-b\nsecond line")), Now: t0.Add(10 * sec)}, InvariantDesignationChange},
		{"newline in stored designation (I2)", &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Delete, Caller: mgrB,
			Old: mk(leaseobject.Leases, "team-auto", "l", desig("user:mgr-a\nsecond line")), Now: t0.Add(10 * sec)}, InvariantDesignatedWriter},
		{"newline in username (I1)", &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Create, Caller: leaseobject.Caller{Username: "user:evil\nline"},
			New: mk(leaseobject.Leases, "team-auto", "l"), Now: t0.Add(10 * sec)}, InvariantManager},
		{"long username and name", &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Create, Caller: leaseobject.Caller{Username: "user:" + long},
			New: mk(leaseobject.MultiClusterLeases, "team-auto", longName), Now: t0.Add(10 * sec)}, InvariantManager},
		{"long holders", &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: mgrB,
			Old: mk(leaseobject.Leases, "team-open", longName, holder(long)), New: mk(leaseobject.Leases, "team-open", longName, holder(longUTF8)), Now: t0.Add(10 * sec)}, InvariantFencing},
		{"long multibyte designation", &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: mgrA,
			Old: mk(leaseobject.Leases, "team-auto", "l"), New: mk(leaseobject.Leases, "team-auto", "l", desig(longUTF8)), Now: t0.Add(10 * sec)}, InvariantDesignationChange},
		{"long multibyte name", &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Create, Caller: stranger,
			New: mk(leaseobject.Leases, "team-auto", longUTF8), Now: t0.Add(10 * sec)}, InvariantManager},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(p, c.req)
			if d.Verdict != Deny || d.Invariant != c.inv {
				t.Fatalf("decision %+v, want a %s denial", d, c.inv)
			}
			checkMessage(t, d.Message)
		})
	}
}

// TestDecideTruncatedMessage checks that an over-long message is cut to the
// limit and marked.
func TestDecideTruncatedMessage(t *testing.T) {
	p := mustCompile(t, decidePolicy)
	req := &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Create, Caller: leaseobject.Caller{Username: "user:" + strings.Repeat("x", 300)},
		New: mk(leaseobject.MultiClusterLeases, "team-auto", strings.Repeat("n", 253)), Now: t0}
	d := Decide(p, req)
	if len(d.Message) != MaxMessageLength || !strings.HasSuffix(d.Message, "...") {
		t.Errorf("message of %d bytes %q, want %d bytes ending in ...", len(d.Message), d.Message, MaxMessageLength)
	}
	// The username is clipped so the kind and object still show.
	if !strings.Contains(d.Message, "... is not a manager of multiclusterlease team-auto/nnn") {
		t.Errorf("message %q does not keep the problem and object after a clipped username", d.Message)
	}
}

func TestVerdictString(t *testing.T) {
	for v, s := range map[Verdict]string{Allow: "allow", Deny: "deny", Warn: "warn", Audit: "audit", Verdict(9): "unknown"} {
		if got := v.String(); got != s {
			t.Errorf("Verdict(%d).String() = %q, want %q", v, got, s)
		}
	}
}

// TestRenewalPathDoesNotAllocate: docs/design.md and decide.go promise that admitted writes,
// the renewal path included, do not allocate.
func TestRenewalPathDoesNotAllocate(t *testing.T) {
	p, req := renewalFixture(t)
	d := Decide(p, req)
	if d.Verdict != Allow || d.Rule != "kcc-namespace-leases" || d.RenewalInterval != 5*sec || d.Message != "" {
		t.Fatalf("renewal fixture decision %+v, want an admitted 5s renewal under kcc-namespace-leases", d)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		d = Decide(p, req)
	})
	if allocs != 0 {
		t.Errorf("Decide on the renewal path allocates %v times per run, want 0", allocs)
	}
	if d.Verdict != Allow {
		t.Errorf("verdict changed across runs: %+v", d)
	}
}

// renewalFixturePolicy: an MCL rule first (so selection walks past it), then
// a bound Lease rule with auto designation, pod holder binding and a minimum
// renewal interval.
const renewalFixturePolicy = `
apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 2s
rules:
- name: kcc-mcl
  resources: [multiclusterleases]
  namespaces: [cnrm-system]
  managers: ["system:serviceaccount:cnrm-system:cnrm-controller-manager-*"]
  designation: auto
  statusWriters: ["system:serviceaccount:multiclusterlease-system:default"]
  minRenewInterval: 5s
- name: kcc-namespace-leases
  resources: [leases]
  namespaces: [cnrm-system]
  bind:
    manager: "system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}"
    lease: "kcc-leader-{ns}"
  designation: auto
  operators: ["system:serviceaccount:configconnector-operator-system:configconnector-operator", "system:masters"]
  statusWriters: ["system:serviceaccount:multiclusterlease-system:default"]
  holderBinding: pod
  minRenewInterval: 5s
`

func renewalFixture(tb testing.TB) (*Policy, *leaseobject.Request) {
	tb.Helper()
	p := mustCompile(tb, renewalFixturePolicy)
	old := mk(leaseobject.Leases, "cnrm-system", "kcc-leader-team-a", holder(kccAHolder), desig(kccA.Username))
	nw := mk(leaseobject.Leases, "cnrm-system", "kcc-leader-team-a", holder(kccAHolder), desig(kccA.Username), renewAt(5*sec))
	return p, &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: kccA, Old: old, New: nw, Now: t0.Add(5 * sec)}
}

// deniedFixture: a KCC manager changes the shared MultiClusterLease while
// another manager's designation is fresh (I2).
func deniedFixture(tb testing.TB) (*Policy, *leaseobject.Request) {
	tb.Helper()
	p := mustCompile(tb, decidePolicy)
	a := kccMgrA.Username
	old := mk(leaseobject.MultiClusterLeases, "cnrm-system", "kcc-leader", desig(a))
	// A renewal that also changes the lease duration: not a shared renewal
	// (those are acknowledged, never refused by I2), so the designated
	// writer's alone.
	nw := mk(leaseobject.MultiClusterLeases, "cnrm-system", "kcc-leader", desig(a), renewAt(5*sec), leaseDur(30*sec))
	return p, &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Update, Caller: kccMgrB, Old: old, New: nw, Now: t0.Add(5 * sec)}
}
