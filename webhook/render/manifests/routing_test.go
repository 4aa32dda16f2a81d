package manifests

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

// program compiles a match condition in the API server's CEL environment
// for new expressions, with the request, object and oldObject untyped, as
// a webhook's match conditions see them.
func program(t *testing.T, expr string, opts ...cel.ProgramOption) cel.Program {
	t.Helper()
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.NewExpressions)
	if err != nil {
		t.Fatal(err)
	}
	// variables: an admission policy's (the renewals policy's "rule").
	env, err = env.Extend(cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%v\n%s", iss.Err(), expr)
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return prg
}

// route evaluates the sample policy's rendered conditions on one write and
// says what decides it: the fail-closed webhook ("closed"), the fail-open
// one ("open"), the renewals policy in the API server ("policy") or
// nothing ("none").
type router struct {
	t                    *testing.T
	closed, open, policy cel.Program
}

// samplePolicy is config/samples/policy.yaml, compiled.
func samplePolicy(t *testing.T) *policy.Policy {
	t.Helper()
	src, err := os.ReadFile("../../../config/samples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policyfile.Parse(src, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sampleRouter(t *testing.T) *router {
	t.Helper()
	r, err := Render(samplePolicy(t), Defaults())
	if err != nil {
		t.Fatal(err)
	}
	hooks := r.Validating.Webhooks
	if r.Renewals == nil {
		t.Fatal("the default rendering has no renewals policy")
	}
	return &router{t: t,
		closed: program(t, condition(hooks[0].MatchConditions, "selected-fail-closed")),
		open:   program(t, condition(hooks[1].MatchConditions, "selected-and-changed")),
		policy: program(t, condition(r.Renewals.Spec.MatchConditions, "renewal-decided-in-process"))}
}

func (r *router) route(req, old, obj map[string]any) string {
	r.t.Helper()
	vars := map[string]any{"request": req, "oldObject": old, "object": obj}
	c, _, cerr := r.closed.Eval(vars)
	o, _, oerr := r.open.Eval(vars)
	if p, _, perr := r.policy.Eval(vars); perr != nil && cerr == nil {
		// An error in the policy's condition refuses the write
		// (failurePolicy Fail): only where the fail-closed webhook's does.
		r.t.Fatalf("only the renewals policy's condition failed: %v", perr)
	} else if perr == nil && p.Value() == true {
		if (cerr == nil && c.Value() == true) || (oerr == nil && o.Value() == true) {
			r.t.Fatalf("the renewals policy and a webhook both take the write")
		}
		return "policy"
	}
	switch {
	case cerr != nil || oerr != nil:
		// The fail-closed webhook's condition failing refuses the write
		// (failurePolicy Fail); the fail-open one's must fail with it.
		if cerr == nil {
			r.t.Fatalf("only the fail-open condition failed: %v", oerr)
		}
		return "error"
	case c.Value() == true && o.Value() == true:
		r.t.Fatalf("both webhooks take the write")
	case c.Value() == true:
		return "closed"
	case o.Value() == true:
		return "open"
	}
	return "none"
}

const (
	sampleNS    = "cnrm-system"
	designatedA = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a"
	managerB    = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b"
	micro       = "2006-01-02T15:04:05.000000Z07:00"
)

// mclWrite is a stored MultiClusterLease renewed at stored, designated to
// team-a's manager, with the managers' entry (owning renewTime) and the
// controller's status entry dated at stored, and the same object as
// written, for a case to change.
func mclWrite(stored time.Time) (old, obj map[string]any) {
	mk := func() map[string]any {
		return map[string]any{
			"apiVersion": "multicluster.core.cnrm.cloud.google.com/v1alpha1", "kind": "MultiClusterLease",
			"metadata": map[string]any{
				"name": "kcc-leader", "namespace": sampleNS,
				"annotations": map[string]any{leaseobject.DesignationAnnotation: designatedA},
				"managedFields": []any{
					map[string]any{"manager": "manager", "operation": "Update", "apiVersion": "multicluster.core.cnrm.cloud.google.com/v1alpha1",
						"time": stored.Truncate(time.Second).Format(time.RFC3339), "fieldsType": "FieldsV1",
						"fieldsV1": map[string]any{"f:spec": map[string]any{"f:holderIdentity": map[string]any{}, "f:renewTime": map[string]any{}}}},
					map[string]any{"manager": "mcl-controller", "operation": "Update", "subresource": "status", "apiVersion": "multicluster.core.cnrm.cloud.google.com/v1alpha1",
						"time": stored.Truncate(time.Second).Format(time.RFC3339), "fieldsType": "FieldsV1",
						"fieldsV1": map[string]any{"f:status": map[string]any{"f:globalHolderIdentity": map[string]any{}}}},
				},
			},
			"spec": map[string]any{"holderIdentity": "cluster-a", "renewTime": stored.Format(micro), "leaseDurationSeconds": int64(15)},
		}
	}
	return mk(), mk()
}

func mfEntry(o map[string]any, i int) map[string]any {
	return o["metadata"].(map[string]any)["managedFields"].([]any)[i].(map[string]any)
}

// Only a renewal that is harmless unchecked rides the fail-open webhook
// (fourth and fifth attack rounds, docs/security.md): each write below
// that reached the fail-open webhook, or no webhook, on the earlier
// rendering goes to the fail-closed one now, while a plain renewal still
// flows while leaseguard is down and a write made a no-op goes to neither.
func TestOnlyHarmlessRenewalsRideTheFailOpenRoute(t *testing.T) {
	r := sampleRouter(t)
	req := func(user string) map[string]any {
		return map[string]any{"operation": "UPDATE", "namespace": sampleNS, "name": "kcc-leader",
			"resource": map[string]any{"group": "multicluster.core.cnrm.cloud.google.com", "version": "v1alpha1", "resource": "multiclusterleases"},
			"userInfo": map[string]any{"username": user}}
	}
	stored := time.Date(2026, 12, 4, 16, 36, 30, 123456000, time.UTC)
	now := stored.Add(2 * time.Second)
	stamp := now.Truncate(time.Second).Format(time.RFC3339)
	renewal := func(at time.Time) (map[string]any, map[string]any) {
		old, obj := mclWrite(stored)
		obj["spec"].(map[string]any)["renewTime"] = at.Format(micro)
		mfEntry(obj, 0)["time"] = stamp // the API server's stamp of this write
		return old, obj
	}
	for _, c := range []struct {
		name   string
		write  func() (old, obj map[string]any)
		user   string
		want   string
		before string // what the earlier rendering did
	}{
		{"a manager's plain renewal", func() (map[string]any, map[string]any) { return renewal(now) }, managerB, "policy", "open"},
		{"the designated manager's plain renewal", func() (map[string]any, map[string]any) { return renewal(now) }, designatedA, "policy", "open"},
		{"a renewal within the second past the stamp + the skew: only the clock to the millisecond tells", func() (map[string]any, map[string]any) {
			return renewal(now.Truncate(time.Second).Add(2*time.Second + 500*time.Millisecond))
		}, managerB, "open", "open"},
		{"a renewal stamped before a stored record of a renewal write", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			mfEntry(old, 0)["time"] = now.Add(time.Second).Truncate(time.Second).Format(time.RFC3339)
			return old, obj
		}, managerB, "open", "open"},
		{"a renewal of a MultiClusterLease without a holder (I2 and I6 apply)", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			old["spec"].(map[string]any)["holderIdentity"] = ""
			obj["spec"].(map[string]any)["holderIdentity"] = ""
			return old, obj
		}, managerB, "open", "open"},
		// A MultiClusterLease's acquireTime is a lease field leaseguard
		// reads (goIdentityChange compares it) wherever a CRD keeps
		// it: a write that changes it is no renewal, and stored unjudged
		// while leaseguard is down it would forge when the holder acquired.
		{"round 6: a renewal that also changes acquireTime, to a time CEL cannot read", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			obj["spec"].(map[string]any)["acquireTime"] = "0500-01-01T00:00:00.000000+24:00"
			return old, obj
		}, managerB, "closed", "open"},
		{"round 6: a renewal that also moves leaseTransitions", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			obj["spec"].(map[string]any)["leaseTransitions"] = int64(7)
			return old, obj
		}, managerB, "closed", "open"},
		{"an operator's renewal (admitted whatever it writes)", func() (map[string]any, map[string]any) { return renewal(now) }, "system:masters", "closed", "closed"},
		// The validating webhooks see a write after the API server has
		// reverted the times of one that changes nothing else: a renewal
		// admission made a no-op arrives exactly as stored.
		{"a renewal admission made a no-op", func() (map[string]any, map[string]any) {
			return mclWrite(stored)
		}, managerB, "none", "none"},
		// Times the API server did not revert are stored: it reverts them
		// only where the objects are deeply equal, and CEL's equality is
		// looser (15 == 15.0).
		{"round 7: leaseDurationSeconds 15.0 and the record re-dated, nothing else changed by CEL's equality", func() (map[string]any, map[string]any) {
			old, obj := mclWrite(stored)
			obj["spec"].(map[string]any)["leaseDurationSeconds"] = 15.0
			mfEntry(obj, 0)["time"] = now.Add(2 * time.Second).Truncate(time.Second).Format(time.RFC3339)
			return old, obj
		}, managerB, "closed", "none"},
		{"round 4.1: generateName changed and another entry re-dated to 2100", func() (map[string]any, map[string]any) {
			old, obj := mclWrite(stored)
			obj["metadata"].(map[string]any)["generateName"] = "x-"
			mfEntry(obj, 1)["time"] = "2100-01-01T00:00:00Z"
			return old, obj
		}, managerB, "closed", "none"},
		// The API server reverts managedFields times only where the lists
		// are equal pair by pair; entries re-dated out of their order are
		// stored with the times they carry.
		{"round 7: entries re-dated out of their order, nothing else changed", func() (map[string]any, map[string]any) {
			old, obj := mclWrite(stored)
			spec, status := mfEntry(obj, 0), mfEntry(obj, 1)
			spec["time"] = now.Add(2 * time.Second).Truncate(time.Second).Format(time.RFC3339)
			status["time"] = "1990-01-01T00:00:00Z"
			obj["metadata"].(map[string]any)["managedFields"] = []any{status, spec}
			return old, obj
		}, managerB, "closed", "none"},
		{"round 7: an entry's fieldsType changed, nothing else", func() (map[string]any, map[string]any) {
			old, obj := mclWrite(stored)
			mfEntry(obj, 1)["fieldsType"] = "FieldsV2"
			return old, obj
		}, managerB, "closed", "none"},
		{"round 4.2: a second renewal within the second, to 2099, after a planted 2100", func() (map[string]any, map[string]any) {
			old, obj := mclWrite(stored)
			mfEntry(old, 1)["time"] = "2100-01-01T00:00:00Z" // planted earlier
			mfEntry(obj, 1)["time"] = "2100-01-01T00:00:00Z"
			obj["spec"].(map[string]any)["renewTime"] = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Format(micro)
			return old, obj // the writer's own entry not re-stamped: the same second
		}, managerB, "closed", "open"},
		{"round 4.2: a renewal ahead of the API server's stamp", func() (map[string]any, map[string]any) { return renewal(now.Add(10 * time.Second)) }, managerB, "closed", "closed"},
		{"round 4.3: renewTime moved backwards", func() (map[string]any, map[string]any) {
			return renewal(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
		}, managerB, "closed", "open"},
		{"renewals that crossed on their way: a millisecond behind the stored one", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			old["spec"].(map[string]any)["renewTime"] = now.Format(micro)
			obj["spec"].(map[string]any)["renewTime"] = now.Add(-time.Millisecond).Format(micro)
			return old, obj
		}, managerB, "policy", "open"},
		{"round 4.3: renewTime more than the skew behind the API server's stamp", func() (map[string]any, map[string]any) {
			return renewal(now.Truncate(time.Second).Add(-2*time.Second - time.Millisecond))
		}, managerB, "closed", "open"},
		{"a late renewal: composed 5 s before the API server's stamp, still after the stored one", func() (map[string]any, map[string]any) {
			old, obj := mclWrite(stored.Add(-10 * time.Second))
			obj["spec"].(map[string]any)["renewTime"] = now.Add(-5 * time.Second).Format(micro)
			mfEntry(obj, 0)["time"] = stamp
			return old, obj
		}, managerB, "policy", "closed"},
		{"a late renewal that moves renewTime backwards, beyond the skew", func() (map[string]any, map[string]any) {
			old, obj := mclWrite(stored)
			obj["spec"].(map[string]any)["renewTime"] = now.Add(-5 * time.Second).Format(micro)
			mfEntry(obj, 0)["time"] = stamp
			return old, obj
		}, managerB, "closed", "closed"},
		{"round 4.3: renewTime cleared", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			delete(obj["spec"].(map[string]any), "renewTime")
			return old, obj
		}, designatedA, "closed", "open"},
		{"round 5.4: renewTime with no fraction, which typed clients cannot read", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			obj["spec"].(map[string]any)["renewTime"] = now.Format(time.RFC3339)
			return old, obj
		}, managerB, "closed", "open"},
		{"round 5.4: renewTime with a lower-case t", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			obj["spec"].(map[string]any)["renewTime"] = "2026-12-04t16:36:32.000000Z"
			return old, obj
		}, managerB, "closed", "error"},
		{"a renewal that also writes a label", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			obj["metadata"].(map[string]any)["labels"] = map[string]any{"seen-by": "b"}
			return old, obj
		}, managerB, "closed", "open"},
		{"a renewal that re-dates another entry", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			mfEntry(obj, 1)["time"] = stamp
			return old, obj
		}, managerB, "closed", "open"},
		{"a renewal with no entry owning renewTime", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			obj["metadata"].(map[string]any)["managedFields"] = []any{mfEntry(obj, 1)}
			return old, obj
		}, managerB, "closed", "closed"},
		{"a stored renewTime typed clients cannot read, repaired by a renewal", func() (map[string]any, map[string]any) {
			old, obj := renewal(now)
			old["spec"].(map[string]any)["renewTime"] = stored.Format(time.RFC3339)
			return old, obj
		}, designatedA, "closed", "open"},
	} {
		t.Run(c.name, func(t *testing.T) {
			old, obj := c.write()
			r.t = t
			if got := r.route(req(c.user), old, obj); got != c.want {
				t.Errorf("routed to %q, want %q (before this round: %q)", got, c.want, c.before)
			}
		})
	}
}

// Under designation by annotation nobody renews until an operator records
// the designated manager (Decide refuses every spec write, I2): a manager's
// plain renewal of such a lease goes to the fail-closed webhook, or it
// would be stored unjudged while leaseguard is down. Once one is recorded,
// its renewals flow (to the renewals policy where it decides them, else the
// fail-open webhook) and another manager's go to the fail-closed webhook.
func TestAnnotationDesignationRenewsOnlyOnceRecorded(t *testing.T) {
	const ns, a, b = "team-a", "svc:a", "svc:b"
	r := render(t, head+`- name: annot
  resources: [leases]
  namespaces: [team-a]
  managers: ["svc:*"]
  designation: annotation
  operators: ["ops"]
`, Defaults())
	rt := &router{t: t,
		closed: program(t, condition(r.Validating.Webhooks[0].MatchConditions, "selected-fail-closed")),
		open:   program(t, condition(r.Validating.Webhooks[1].MatchConditions, "selected-and-changed")),
		policy: program(t, condition(r.Renewals.Spec.MatchConditions, "renewal-decided-in-process"))}
	stored := time.Date(2026, 12, 4, 16, 36, 30, 123456000, time.UTC)
	now := stored.Add(2 * time.Second)
	lease := func(designated string, at time.Time, stamp time.Time) map[string]any {
		meta := map[string]any{"name": "l", "namespace": ns,
			"managedFields": []any{map[string]any{"manager": "elector", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
				"time": stamp.Truncate(time.Second).Format(time.RFC3339), "fieldsType": "FieldsV1",
				"fieldsV1": map[string]any{"f:spec": map[string]any{"f:holderIdentity": map[string]any{}, "f:renewTime": map[string]any{}}}}}}
		if designated != "" {
			meta["annotations"] = map[string]any{leaseobject.DesignationAnnotation: designated}
		}
		return map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
			"spec": map[string]any{"holderIdentity": "a-0_1", "renewTime": at.Format(micro), "leaseDurationSeconds": int64(15)}}
	}
	req := func(user string) map[string]any {
		return map[string]any{"operation": "UPDATE", "namespace": ns, "name": "l",
			"resource": map[string]any{"group": "coordination.k8s.io", "version": "v1", "resource": "leases"},
			"userInfo": map[string]any{"username": user}}
	}
	for _, c := range []struct {
		name, designated, user, want string
	}{
		{"no designation recorded: a manager's plain renewal", "", a, "closed"},
		{"recorded: the designated manager's plain renewal", a, a, "policy"},
		{"recorded: another manager's plain renewal", a, b, "closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt.t = t
			if got := rt.route(req(c.user), lease(c.designated, stored, stored), lease(c.designated, now, now)); got != c.want {
				t.Errorf("routed to %q, want %q", got, c.want)
			}
		})
	}
}

// Config Connector's dedicated manager namespaces (the sample's
// kcc-manager-namespace-leases): a Lease is bound by its name and its
// namespace, and the generated conditions say exactly which manager that
// is, so only its pod's plain renewals stay off the fail-closed webhook.
func TestDedicatedManagerNamespacesRouteByNameAndNamespace(t *testing.T) {
	r := sampleRouter(t)
	const mns = "kcc-managers"
	stored := time.Date(2026, 12, 4, 16, 36, 30, 123456000, time.UTC)
	now := stored.Add(8 * time.Second)
	lease := func(ns string, at time.Time) map[string]any {
		return map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
			"metadata": map[string]any{"name": "kcc-leader-team-a", "namespace": ns,
				"managedFields": []any{map[string]any{"manager": "manager", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
					"time": at.Truncate(time.Second).Format(time.RFC3339), "fieldsType": "FieldsV1",
					"fieldsV1": map[string]any{"f:spec": map[string]any{"f:holderIdentity": map[string]any{}, "f:renewTime": map[string]any{}}}}}},
			"spec": map[string]any{"holderIdentity": "cnrm-controller-manager-team-a-0_1", "renewTime": at.Format(micro), "leaseDurationSeconds": int64(15)}}
	}
	req := func(ns, user, pod string) map[string]any {
		return map[string]any{"operation": "UPDATE", "namespace": ns, "name": "kcc-leader-team-a",
			"resource": map[string]any{"group": "coordination.k8s.io", "version": "v1", "resource": "leases"},
			"userInfo": map[string]any{"username": user, "extra": map[string]any{"authentication.kubernetes.io/pod-name": []any{pod}}}}
	}
	sa := func(ns, team string) string {
		return "system:serviceaccount:" + ns + ":cnrm-controller-manager-" + team
	}
	for _, c := range []struct {
		name, ns, user, pod, want string
	}{
		// The sample's rule warns: the webhook decides its renewals, and
		// stores them while leaseguard is down.
		{"the bound manager's pod renews its lease in its namespace", mns, sa(mns, "team-a"), "cnrm-controller-manager-team-a-0", "open"},
		{"another namespace's manager in the same manager namespace", mns, sa(mns, "team-b"), "cnrm-controller-manager-team-a-0", "closed"},
		{"the same manager name from another manager namespace", mns, sa("other", "team-a"), "cnrm-controller-manager-team-a-0", "closed"},
		{"the bound manager's sibling pod (holder binding)", mns, sa(mns, "team-a"), "cnrm-controller-manager-team-a-1", "closed"},
		{"the bound manager's lease name in another namespace", "elsewhere", sa(mns, "team-a"), "cnrm-controller-manager-team-a-0", "closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.t = t
			if got := r.route(req(c.ns, c.user, c.pod), lease(c.ns, stored), lease(c.ns, now)); got != c.want {
				t.Errorf("routed to %q, want %q", got, c.want)
			}
		})
	}
}

// client-go writes a Lease's zero MicroTime as null, and the API server
// stores and hands CEL that null (its coordinated elector renews a lease
// the API server handed over without an acquireTime): a time stored as
// null is read as absent, never given to timestamp(), whose error would
// refuse the write (failurePolicy Fail) with a CEL error instead of a
// decision. Until 2026-12-06 the renewals policy refused every renewal of
// such a lease (test/integration TestCoordinatedLeaderElection...).
func TestLeaseTimesStoredAsNullAreReadAsAbsent(t *testing.T) {
	r := sampleRouter(t)
	const mns = "kcc-managers"
	stored := time.Date(2026, 12, 6, 0, 49, 54, 727000000, time.UTC)
	now := stored.Add(8 * time.Second)
	lease := func(at time.Time, acquire, renew any) map[string]any {
		return map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
			"metadata": map[string]any{"name": "kcc-leader-team-a", "namespace": mns,
				"managedFields": []any{map[string]any{"manager": "manager", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
					"time": at.Truncate(time.Second).Format(time.RFC3339), "fieldsType": "FieldsV1",
					"fieldsV1": map[string]any{"f:spec": map[string]any{"f:holderIdentity": map[string]any{}, "f:renewTime": map[string]any{}, "f:acquireTime": map[string]any{}}}}}},
			"spec": map[string]any{"holderIdentity": "cnrm-controller-manager-team-a-0", "acquireTime": acquire, "renewTime": renew, "leaseDurationSeconds": int64(15)}}
	}
	req := map[string]any{"operation": "UPDATE", "namespace": mns, "name": "kcc-leader-team-a",
		"resource": map[string]any{"group": "coordination.k8s.io", "version": "v1", "resource": "leases"},
		"userInfo": map[string]any{"username": "system:serviceaccount:" + mns + ":cnrm-controller-manager-team-a",
			"extra": map[string]any{"authentication.kubernetes.io/pod-name": []any{"cnrm-controller-manager-team-a-0"}}}}
	for _, c := range []struct {
		name     string
		old, obj map[string]any
		want     string
	}{
		{"a renewal keeping a null acquireTime", lease(stored, nil, stored.Format(micro)), lease(now, nil, now.Format(micro)), "open"},
		{"a renewal of a lease whose renewTime is null", lease(stored, nil, nil), lease(now, nil, now.Format(micro)), "closed"},
		{"a write that nulls renewTime", lease(stored, nil, stored.Format(micro)), lease(now, nil, nil), "closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.t = t
			if got := r.route(req, c.old, c.obj); got != c.want {
				t.Errorf("routed to %q, want %q", got, c.want)
			}
		})
	}
}

// A deletecollection's item reviews carry the object in oldObject and an
// empty request.name: a rule that selects by name must still select them,
// or the collection delete passes by every webhook.
func TestDeleteCollectionItemsAreSelectedByName(t *testing.T) {
	r := render(t, head+`- name: named
  resources: [leases]
  namespaces: [team-a]
  names: ["kcc-leader-*"]
  managers: ["svc:*"]
`, Defaults())
	closed := program(t, condition(r.Validating.Webhooks[0].MatchConditions, "selected-fail-closed"))
	req := map[string]any{"operation": "DELETE", "namespace": "team-a", "name": "",
		"resource": map[string]any{"group": "coordination.k8s.io", "version": "v1", "resource": "leases"},
		"userInfo": map[string]any{"username": "someone"}}
	old := map[string]any{"metadata": map[string]any{"name": "kcc-leader-a", "namespace": "team-a"},
		"spec": map[string]any{"holderIdentity": "a-0"}}
	got, _, err := closed.Eval(map[string]any{"request": req, "oldObject": old, "object": nil})
	if err != nil || got.Value() != true {
		t.Fatalf("a deletecollection item of kcc-leader-a: fail-closed condition %v (%v), want true", got, err)
	}
	old["metadata"].(map[string]any)["name"] = "other"
	if got, _, err := closed.Eval(map[string]any{"request": req, "oldObject": old, "object": nil}); err != nil || got.Value() != false {
		t.Fatalf("a deletecollection item of another lease: %v (%v), want false", got, err)
	}
}

// Every expression of the renewals policy compiles in the API server's
// CEL environment (an installation the API server refuses would leave
// the renewals it should decide to the fail-open webhook's narrowed
// condition, that is to nobody), for a policy with each kind of rule.
func TestTheRenewalsPolicyCompiles(t *testing.T) {
	r := render(t, head+`- name: mcl
  resources: [multiclusterleases]
  namespaces: [team-a]
  managers: ["svc:*"]
  designation: auto
  operators: ["ops"]
- name: leases-auto
  resources: [leases]
  namespaces: [team-b]
  managers: ["svc:*"]
  minRenewInterval: auto
- name: leases-fixed
  resources: [leases, multiclusterleases]
  namespaces: [team-c]
  managers: ["svc:*"]
  minRenewInterval: 6s
- name: warned
  resources: [leases]
  namespaces: [team-d]
  managers: ["svc:*"]
  enforcement: warn
`, Defaults())
	if r.Renewals == nil || r.RenewalsBinding == nil {
		t.Fatal("no renewals policy rendered")
	}
	if got := condition(r.Renewals.Spec.MatchConditions, "renewal-decided-in-process"); got == "false" {
		t.Fatal("the renewals policy decides nothing")
	}
	for _, mc := range r.Renewals.Spec.MatchConditions {
		program(t, mc.Expression)
	}
	for _, v := range r.Renewals.Spec.Variables {
		program(t, v.Expression)
	}
	if len(r.Renewals.Spec.Validations) == 0 {
		t.Fatal("no validations")
	}
	for _, v := range r.Renewals.Spec.Validations {
		program(t, v.Expression)
		if v.MessageExpression != "" {
			program(t, v.MessageExpression)
		}
	}
	for _, rule := range []string{"rule mcl:", "rule leases-auto:", "rule leases-fixed:"} {
		found := false
		for _, v := range r.Renewals.Spec.Validations {
			found = found || strings.Contains(v.MessageExpression, rule)
		}
		if !found {
			t.Errorf("no validation speaks for %s", rule)
		}
	}
	for _, v := range r.Renewals.Spec.Validations {
		if strings.Contains(v.MessageExpression, "rule warned:") {
			t.Errorf("a warn rule's renewals are decided in process: %s", v.MessageExpression)
		}
	}
}

// A status writer's status write rides the fail-open route: the policy
// admits it whatever it writes (I8 asks who), and every manager's lock
// polls the status after each write, so a status refused while leaseguard
// is down ends every leadership (found by the kind stage's namespace-mode
// workload on the real lock: all 10 managers exited with every replica
// down). Anyone else's status write, and the status writer's write of the
// object itself, stay on the fail-closed route.
func TestStatusWritersStatusWritesFlowWhileLeaseguardIsDown(t *testing.T) {
	r := sampleRouter(t)
	const statusWriter = "system:serviceaccount:multiclusterlease-system:default"
	req := func(user, subresource string, groups ...string) map[string]any {
		rq := map[string]any{"operation": "UPDATE", "namespace": sampleNS, "name": "kcc-leader",
			"resource": map[string]any{"group": "multicluster.core.cnrm.cloud.google.com", "version": "v1alpha1", "resource": "multiclusterleases"},
			"userInfo": map[string]any{"username": user, "groups": groups}}
		if subresource != "" {
			rq["subResource"] = subresource
		}
		return rq
	}
	stored := time.Date(2026, 12, 5, 22, 38, 30, 0, time.UTC)
	statusWrite := func() (map[string]any, map[string]any) {
		old, obj := mclWrite(stored)
		obj["status"] = map[string]any{"observedGeneration": int64(7), "globalHolderIdentity": "cluster-a"}
		return old, obj
	}
	finalizer := func() (map[string]any, map[string]any) {
		old, obj := mclWrite(stored)
		obj["metadata"].(map[string]any)["finalizers"] = []any{leaseobject.ControllerFinalizer}
		return old, obj
	}
	for _, c := range []struct {
		name        string
		user        string
		groups      []string
		subresource string
		write       func() (old, obj map[string]any)
		want        string
	}{
		{"the status writer's status write", statusWriter, nil, "status", statusWrite, "open"},
		{"a manager's status write", managerB, nil, "status", statusWrite, "closed"},
		{"the designated manager's status write", designatedA, nil, "status", statusWrite, "closed"},
		{"a status write by a stranger in the status writer's namespace", "system:serviceaccount:multiclusterlease-system:other", nil, "status", statusWrite, "closed"},
		{"an operator's status write (admitted, but judged)", "system:masters", []string{"system:masters"}, "status", statusWrite, "closed"},
		{"the status writer's finalizer on the object itself", statusWriter, nil, "", finalizer, "closed"},
		{"the status writer's status write that changes nothing", statusWriter, nil, "status", func() (map[string]any, map[string]any) { return mclWrite(stored) }, "none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			old, obj := c.write()
			r.t = t
			if got := r.route(req(c.user, c.subresource, c.groups...), old, obj); got != c.want {
				t.Errorf("routed to %q, want %q", got, c.want)
			}
		})
	}
	// The Go specification says the same (goFailClosed).
	p := samplePolicy(t)
	for _, c := range []struct {
		user string
		want bool
	}{{statusWriter, false}, {managerB, true}} {
		req := &leaseobject.Request{Operation: leaseobject.Update, Resource: leaseobject.MultiClusterLeases, Subresource: leaseobject.StatusSubresource,
			Caller: leaseobject.Caller{Username: c.user},
			Old:    &leaseobject.Object{Namespace: sampleNS, Name: "kcc-leader"}, New: &leaseobject.Object{Namespace: sampleNS, Name: "kcc-leader"}}
		if got := goFailClosed(p, req); got != c.want {
			t.Errorf("goFailClosed of %s's status write: %t, want %t", c.user, got, c.want)
		}
	}
}
