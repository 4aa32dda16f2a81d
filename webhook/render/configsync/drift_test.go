package configsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

const (
	prefix    = "leaseguard"
	vwcName   = prefix + validatingSuffix
	policyOne = "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n- name: r\n  resources: [leases]\n  namespaces: [team-a]\n  managers: [a]\n"
	policyTwo = policyOne + "- name: s\n  resources: [leases]\n  namespaces: [team-b]\n  managers: [b]\n"
)

// policies is a Policies whose policy the test swaps.
type policies struct {
	mu      sync.Mutex
	p       *policy.Policy
	sha     string
	changed chan struct{}
}

func newPolicies(t *testing.T, src string) *policies {
	ps := &policies{}
	ps.set(t, src)
	return ps
}

func (ps *policies) set(t *testing.T, src string) {
	t.Helper()
	p, err := policyfile.Parse([]byte(src), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	sum := sha256.Sum256([]byte(src))
	ps.p, ps.sha = p, hex.EncodeToString(sum[:])
	if ps.changed != nil {
		close(ps.changed)
		ps.changed = nil
	}
}

func (ps *policies) InForce() (*policy.Policy, string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.p, ps.sha
}

func (ps *policies) Changed() <-chan struct{} {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.changed == nil {
		ps.changed = make(chan struct{})
	}
	return ps.changed
}

type recorder struct {
	mu                sync.Mutex
	inSync, bypassed  bool
	updated, repaired int
}

func (r *recorder) AdmissionConfigurationSync(inSync, bypassed bool, updated, repaired int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inSync, r.bypassed = inSync, bypassed
	r.updated += updated
	r.repaired += repaired
}

// installed is a fake API server holding the install of the policy src: its
// static rendering, without leaseguard's annotations. A dry-run update
// answers the object without storing it (the fake stores every update).
func installed(t *testing.T, src string) *fake.Clientset {
	t.Helper()
	p, err := policyfile.Parse([]byte(src), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := manifests.Render(p, manifests.Options{Namespace: "leaseguard-system", ServiceName: "leaseguard-webhook-service", Prefix: prefix, Coalescing: manifests.CoalesceOff})
	if err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{r.Validating}
	if r.Mutating != nil {
		objs = append(objs, r.Mutating)
	}
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateActionImpl)
		if len(u.UpdateOptions.DryRun) > 0 {
			return true, u.GetObject().DeepCopyObject(), nil
		}
		return false, nil, nil
	})
	return cs
}

// syncer is a Syncer with a clock the test moves.
func syncer(cs *fake.Clientset, ps *policies, now *time.Time) *Syncer {
	return &Syncer{Client: cs, Prefix: prefix, Namespace: "leaseguard-system", Policies: ps, Recorder: &recorder{},
		Log: logr.Discard(), Resync: time.Minute, now: func() time.Time { return *now }}
}

func get(t *testing.T, cs *fake.Clientset) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), vwcName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// weaken edits the fail-closed webhook as a hand edit that defeats it
// would: failurePolicy Ignore and a condition matching nothing, with the
// policy annotation set to named ("" drops it).
func weaken(t *testing.T, cs *fake.Clientset, named string, extra map[string]string) {
	t.Helper()
	v := get(t, cs)
	ignore := admissionregistrationv1.Ignore
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == manifests.ValidateWebhook {
			v.Webhooks[i].FailurePolicy = &ignore
			v.Webhooks[i].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "nothing", Expression: "false"}}
		}
	}
	if named == "" {
		delete(v.Annotations, PolicyAnnotation)
	} else {
		v.Annotations[PolicyAnnotation] = named
	}
	for k, val := range extra {
		v.Annotations[k] = val
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(context.Background(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// failClosed says whether the fail-closed webhook is as rendered.
func failClosed(t *testing.T, cs *fake.Clientset) bool {
	t.Helper()
	for _, w := range get(t, cs).Webhooks {
		if w.Name == manifests.ValidateWebhook {
			return w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Fail && w.MatchConditions[0].Name != "nothing"
		}
	}
	t.Fatalf("no webhook %s", manifests.ValidateWebhook)
	return false
}

func mustSync(t *testing.T, s *Syncer, force bool) Outcome {
	t.Helper()
	out, err := s.sync(context.Background(), force)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAnEditThatDropsThePolicyAnnotationIsRepairedAtTheNextResync(t *testing.T) {
	now := time.Unix(1e9, 0)
	cs, ps := installed(t, policyOne), newPolicies(t, policyOne)
	s := syncer(cs, ps, &now)
	mustSync(t, s, true)
	if v := get(t, cs); v.Annotations[PolicyAnnotation] != ps.sha || v.Annotations[RenderingAnnotation] != seal(ps.sha, v) {
		t.Fatalf("after the first sync: annotations %v, want the policy and the seal", v.Annotations)
	}

	weaken(t, cs, "", nil)
	out := mustSync(t, s, false)
	if !failClosed(t, cs) {
		t.Fatal("a resync left the fail-closed webhook failurePolicy Ignore with a condition matching nothing: the edit dropped leaseguard.io/policy-sha256")
	}
	if v := get(t, cs); v.Annotations[PolicyAnnotation] != ps.sha || v.Annotations[RenderingAnnotation] != seal(ps.sha, v) {
		t.Errorf("after the repair: annotations %v, want the policy and the seal again", v.Annotations)
	}
	if !out.InSync || out.Repaired != 1 {
		t.Errorf("outcome %+v, want in sync with 1 repair", out)
	}
	// Nothing left to do: a second resync writes nothing.
	if out := mustSync(t, s, false); out.Updated != 0 || !out.InSync {
		t.Errorf("the resync after the repair: %+v, want nothing written, in sync", out)
	}
}

func TestAnEditNamingAnotherPolicyIsReportedThenRepairedAResyncLater(t *testing.T) {
	now := time.Unix(1e9, 0)
	cs, ps := installed(t, policyOne), newPolicies(t, policyOne)
	s := syncer(cs, ps, &now)
	mustSync(t, s, true)

	weaken(t, cs, "0123456789abcdef", nil)
	now = now.Add(time.Minute)
	if out := mustSync(t, s, false); out.InSync || out.Updated != 0 {
		t.Errorf("first resync after the edit: %+v, want out of sync and nothing written (a replica holding the policy named may repair it first)", out)
	}
	if failClosed(t, cs) {
		t.Fatal("repaired at once")
	}
	now = now.Add(time.Minute)
	out := mustSync(t, s, false)
	if !failClosed(t, cs) || !out.InSync || out.Repaired != 1 {
		t.Errorf("a resync later: repaired %v, outcome %+v; want the rendering back, in sync, 1 repair", failClosed(t, cs), out)
	}
}

func TestAnotherPolicysRenderingIsLeftAloneThenReportedStale(t *testing.T) {
	now := time.Unix(1e9, 0)
	cs := installed(t, policyOne)
	newer := syncer(cs, newPolicies(t, policyTwo), &now)
	mustSync(t, newer, true)
	before := get(t, cs)

	// A replica still holding the old policy, as during a ConfigMap
	// roll-out: it must not undo the newer rendering.
	old := syncer(cs, newPolicies(t, policyOne), &now)
	for _, step := range []time.Duration{0, time.Minute, time.Minute} {
		now = now.Add(step)
		if out := mustSync(t, old, false); !out.InSync || out.Updated != 0 {
			t.Fatalf("%s into the roll-out: %+v, want in sync, nothing written", step, out)
		}
	}
	now = now.Add(DefaultStaleAfter)
	if out := mustSync(t, old, false); out.InSync || out.Updated != 0 {
		t.Errorf("after %s: %+v, want reported out of sync, still nothing written", DefaultStaleAfter, out)
	}
	if after := get(t, cs); after.Annotations[PolicyAnnotation] != before.Annotations[PolicyAnnotation] {
		t.Errorf("the old replica rewrote the configuration for its policy")
	}
}

func TestABypassIsHonouredUntilLifted(t *testing.T) {
	now := time.Unix(1e9, 0)
	cs, ps := installed(t, policyOne), newPolicies(t, policyOne)
	s := syncer(cs, ps, &now)
	mustSync(t, s, true)

	weaken(t, cs, ps.sha, map[string]string{BypassAnnotation: "INC-42: leaseguard unreachable"})
	for _, force := range []bool{false, true} {
		out := mustSync(t, s, force)
		if !out.Bypassed || out.InSync || out.Updated != 0 {
			t.Errorf("bypassed, force %v: %+v, want bypassed, out of sync (edited), nothing written", force, out)
		}
		if failClosed(t, cs) {
			t.Fatalf("bypassed, force %v: the operator's edit was undone", force)
		}
	}

	v := get(t, cs)
	delete(v.Annotations, BypassAnnotation)
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(context.Background(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out := mustSync(t, s, false)
	if !failClosed(t, cs) || out.Bypassed || !out.InSync {
		t.Errorf("bypass lifted: repaired %v, outcome %+v; want the rendering back", failClosed(t, cs), out)
	}
}

// A policy swapped in while bypassed is written once the bypass is lifted,
// not left for StaleAfter as another policy's rendering.
func TestAPolicyChangeDuringABypassIsWrittenWhenItIsLifted(t *testing.T) {
	cs, ps := installed(t, policyOne), newPolicies(t, policyOne)
	rec := &recorder{}
	s := &Syncer{Client: cs, Prefix: prefix, Namespace: "leaseguard-system", Policies: ps, Recorder: rec, Log: logr.Discard()}
	// Each reconcile is what Run does on a trigger: a watch event, a
	// policy change, a resync (the triggers are tested through the API
	// server, test/integration).
	reconcile := func() {
		t.Helper()
		if _, err := s.reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	named := func() string { return get(t, cs).Annotations[PolicyAnnotation] }
	first := ps.sha
	reconcile()
	if named() != first {
		t.Fatal("the first run did not write the policy's rendering")
	}

	v := get(t, cs)
	v.Annotations[BypassAnnotation] = "maintenance"
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(context.Background(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if !rec.bypassed {
		t.Fatal("the bypass is not reported")
	}
	ps.set(t, policyTwo)
	reconcile()
	reconcile()
	if named() != first {
		t.Fatal("a policy change was written while bypassed")
	}

	v = get(t, cs)
	delete(v.Annotations, BypassAnnotation)
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(context.Background(), v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, second := ps.InForce()
	reconcile()
	if named() != second {
		t.Fatalf("once the bypass is lifted the configuration names %s, want the new policy %s", named(), second)
	}
	if rec.bypassed || !rec.inSync {
		t.Errorf("once lifted: bypassed %v, in sync %v; want false, true", rec.bypassed, rec.inSync)
	}
}

func TestTheSealCoversWhatThePolicyDecidesNotWhatTheInstallChose(t *testing.T) {
	cs := installed(t, policyOne)
	v := get(t, cs)
	base := seal("p", v)
	if seal("q", v) == base {
		t.Error("the seal does not cover the policy annotation")
	}
	rotated := v.DeepCopy()
	rotated.Webhooks[0].ClientConfig.CABundle = []byte("a rotated CA")
	rotated.Webhooks[0].TimeoutSeconds = func(n int32) *int32 { return &n }(3)
	if seal("p", rotated) != base {
		t.Error("a caBundle rotation or the install's timeout breaks the seal")
	}
	for what, edit := range map[string]func(*admissionregistrationv1.ValidatingWebhookConfiguration){
		"failurePolicy": func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			ignore := admissionregistrationv1.Ignore
			c.Webhooks[0].FailurePolicy = &ignore
		},
		"matchConditions": func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = c.Webhooks[0].MatchConditions[:0]
		},
		"a webhook removed": func(c *admissionregistrationv1.ValidatingWebhookConfiguration) { c.Webhooks = c.Webhooks[1:] },
		"the fail-open choice": func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
			c.Annotations[manifests.FailOpenAnnotation] = "true"
		},
	} {
		c := v.DeepCopy()
		edit(c)
		if seal("p", c) == base {
			t.Errorf("an edit of %s keeps the seal", what)
		}
	}
}
