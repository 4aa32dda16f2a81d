package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/procstat"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// The renewed Leases live in selectedNS, which leaseguard's policy selects,
// or in unselectedNS, which no rule selects.
const (
	selectedNS   = "bench-selected"
	unselectedNS = "bench-unselected"
)

// benchPolicy binds elector-N to lease-N in selectedNS, with the holder bound
// to its pod: every renewal is decided in full (no rate limit, no
// coalescing, which would change what is timed).
const benchPolicy = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: bench
  resources: [leases]
  namespaces: [` + selectedNS + `]
  bind:
    manager: "system:serviceaccount:` + selectedNS + `:elector-{n}"
    lease: "lease-{n}"
  holderBinding: pod
`

// The names of the setups, in report order.
var setupNames = []string{"none", "vap", "leaseguard-vap", "leaseguard-vap-static", "noop-plain", "noop-webhook", "noop-routed", "leaseguard-selected", "leaseguard-unselected"}

// setup is one way of admitting the renewals.
type setup struct {
	name      string
	namespace string
	install   func(context.Context) error
	uninstall func(context.Context) error
	// prove shows, before the setup is timed, that it is in effect.
	prove func(context.Context) error
}

type bench struct {
	o      options
	cp     *controlplane.ControlPlane
	guard  *controlplane.Leaseguard
	admin  kubernetes.Interface
	procs  map[string]int
	setups map[string]*setup
	// noopCalls counts the calls the no-op webhooks have answered.
	noopCalls     func() int64
	inProcessNoop atomic.Int64
}

func newBench(ctx context.Context, cp *controlplane.ControlPlane, guard *controlplane.Leaseguard, policyPath string, o options) (*bench, error) {
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	b := &bench{o: o, cp: cp, guard: guard, admin: admin}
	if b.procs, err = procstat.FindChildren(map[string]bool{"kube-apiserver": true, "etcd": true, "leaseguard": true}); err != nil {
		return nil, err
	}
	for _, ns := range []string{selectedNS, unselectedNS} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	noopBase, err := b.startNoopProcess(ctx)
	if err != nil {
		return nil, err
	}
	noopURL := noopBase + "/noop"
	data, err := os.ReadFile(policyPath)
	if err != nil {
		return nil, err
	}
	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		return nil, err
	}
	rendered, err := manifests.Render(p, manifests.Options{
		Namespace: "leaseguard-system", Prefix: "leaseguard", CABundle: cp.CAData(), Coalescing: manifests.CoalesceOff,
		URL: "https://" + net.JoinHostPort(cp.WebhookHost, strconv.Itoa(cp.WebhookPort)),
	})
	if err != nil {
		return nil, err
	}
	// The same configuration sending every review to the no-op webhook:
	// what the routing costs in the API server (the match conditions that
	// send each write to the fail-open or the fail-closed webhook), with
	// no decision at the other end.
	routed, err := manifests.Render(p, manifests.Options{
		Namespace: "leaseguard-system", Prefix: "bench-routed", CABundle: cp.CAData(), Coalescing: manifests.CoalesceOff,
		URL: noopBase,
	})
	if err != nil {
		return nil, err
	}
	generated, err := vap.Render(p, vap.Defaults())
	if err != nil {
		return nil, err
	}
	staticOptions := vap.Defaults()
	staticOptions.StaticMessages = true
	generatedStatic, err := vap.Render(p, staticOptions)
	if err != nil {
		return nil, err
	}
	b.setups = map[string]*setup{
		"none":                  {name: "none", namespace: selectedNS, install: nothing, uninstall: nothing, prove: b.admitsIntruder(selectedNS)},
		"vap":                   b.vapSetup(),
		"leaseguard-vap":        b.generatedVAPSetup("leaseguard-vap", generated),
		"leaseguard-vap-static": b.generatedVAPSetup("leaseguard-vap-static", generatedStatic),
		"noop-plain":            b.noopSetup("noop-plain", noopURL, ""),
		"noop-webhook":          b.noopSetup("noop-webhook", noopURL, selectedNS),
		"noop-routed":           b.routedNoopSetup(routed.Validating),
		"leaseguard-selected":   b.leaseguardSetup(rendered, selectedNS),
		"leaseguard-unselected": b.leaseguardSetup(rendered, unselectedNS),
	}
	if os.Getenv("BENCH_DIAG") != "" {
		// The plain no-op served from inside this process, beside the
		// renewing clients, as the rounds before 2026-12-03 ran it: it shares
		// their runtime (threads awake, one GC), so it is cheaper than any
		// deployed webhook.
		inProcess, err := b.startInProcessNoop(ctx)
		if err != nil {
			return nil, err
		}
		b.setups["noop-plain-inprocess"] = b.noopSetup("noop-plain-inprocess", inProcess+"/noop", "")
		bare := rendered.Validating.DeepCopy()
		bare.Webhooks = bare.Webhooks[:1]
		bare.Webhooks[0].MatchConditions = nil
		b.setups["leaseguard-nocel"] = b.leaseguardSetup(&manifests.Rendered{Validating: bare}, selectedNS)
		b.setups["leaseguard-nocel"].name = "leaseguard-nocel"
		// The routing with the fail-closed condition evaluated once: the
		// fail-open webhook called for every selected write (only the
		// control-plane conditions kept), the fail-closed one as rendered.
		once := routed.Validating.DeepCopy()
		once.Name = "bench-routed-once"
		for i := range once.Webhooks {
			if strings.HasPrefix(once.Webhooks[i].Name, manifests.RenewalsWebhook) {
				mc := once.Webhooks[i].MatchConditions
				once.Webhooks[i].MatchConditions = mc[:len(mc)-1]
			}
		}
		b.setups["noop-routed-once"] = b.routedNoopSetup(once)
		b.setups["noop-routed-once"].name = "noop-routed-once"
		// The least any such routing can evaluate: the same two webhooks
		// (selectors, control-plane conditions), split by one comparison
		// instead of leaseguard's conditions. A renewal keeps its holder and
		// goes to the fail-open one; a create, to the fail-closed one.
		split := routed.Validating.DeepCopy()
		split.Name = "bench-routed-split"
		for i := range split.Webhooks {
			mc := split.Webhooks[i].MatchConditions
			last := &mc[len(mc)-1]
			last.Name = "split"
			last.Expression = "request.operation == 'UPDATE' && object.spec.?holderIdentity == oldObject.spec.?holderIdentity"
			if !strings.HasPrefix(split.Webhooks[i].Name, manifests.RenewalsWebhook) {
				last.Expression = "!(" + last.Expression + ")"
			}
		}
		b.setups["noop-split"] = b.routedNoopSetup(split)
		b.setups["noop-split"].name = "noop-split"
	}
	return b, nil
}

func nothing(context.Context) error { return nil }

// as is a client of elector n, from its pod, in namespace ns.
func (b *bench) as(user, pod string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(b.cp.Config)
	cfg.QPS, cfg.Burst = 5000, 5000
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	if pod != "" {
		cfg.Impersonate.Extra = map[string][]string{leaseobject.PodNameExtra: {pod}}
	}
	return kubernetes.NewForConfig(cfg)
}

func elector(ns string, n int) (user, pod, lease string) {
	return "system:serviceaccount:" + ns + ":elector-" + strconv.Itoa(n), "elector-" + strconv.Itoa(n) + "-0", "lease-" + strconv.Itoa(n)
}

// intruderWrite has a stranger take over the probe Lease of ns.
func (b *bench) intruderWrite(ctx context.Context, ns string) error {
	cs, err := b.as("system:serviceaccount:"+ns+":intruder", "intruder-0")
	if err != nil {
		return err
	}
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36), Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("intruder-0"), RenewTime: &now, LeaseDurationSeconds: ptr.To[int32](15)}}
	_, err = cs.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{})
	return err
}

func (b *bench) admitsIntruder(ns string) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := b.intruderWrite(ctx, ns); err != nil {
			return fmt.Errorf("an intruder's write in %s with no guard was refused: %w", ns, err)
		}
		return nil
	}
}

func (b *bench) refusesIntruder(ns, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		var err error
		// Admission configuration takes effect within a second or so.
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if err = b.intruderWrite(ctx, ns); err != nil && strings.Contains(err.Error(), want) {
				return nil
			}
		}
		return fmt.Errorf("the intruder's write was not refused with %q: %v", want, err)
	}
}

// generatedVAPSetup is leaseguard without the webhook: the policy as the
// ValidatingAdmissionPolicies `leaseguard vap` renders (docs/vap.md).
func (b *bench) generatedVAPSetup(name string, r *vap.Rendered) *setup {
	api := b.admin.AdmissionregistrationV1
	return &setup{
		name: name, namespace: selectedNS,
		install: func(ctx context.Context) error {
			for _, p := range r.Policies {
				if _, err := api().ValidatingAdmissionPolicies().Create(ctx, p.DeepCopy(), metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			for _, bd := range r.Bindings {
				if _, err := api().ValidatingAdmissionPolicyBindings().Create(ctx, bd.DeepCopy(), metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			return nil
		},
		uninstall: func(ctx context.Context) error {
			for _, bd := range r.Bindings {
				_ = api().ValidatingAdmissionPolicyBindings().Delete(ctx, bd.Name, metav1.DeleteOptions{})
			}
			var err error
			for _, p := range r.Policies {
				if e := api().ValidatingAdmissionPolicies().Delete(ctx, p.Name, metav1.DeleteOptions{}); e != nil {
					err = e
				}
			}
			return err
		},
		prove: b.refusesIntruder(selectedNS, "leaseguard: rule bench:"),
	}
}

// vapSetup is the in-process baseline: a ValidatingAdmissionPolicy holding
// the same identity checks in CEL (the bound manager, the holder its pod, a
// renewTime that does not move backwards).
func (b *bench) vapSetup() *setup {
	fail := admissionregistrationv1.Fail
	pol := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-identity"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": selectedNS}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "object.metadata.name.startsWith('lease-') && request.userInfo.username == 'system:serviceaccount:" + selectedNS + ":elector-' + object.metadata.name.substring(6)",
					Message: "bench: not the bound manager"},
				{Expression: "!has(object.spec.holderIdentity) || object.spec.holderIdentity == '' || (has(request.userInfo.extra) && request.userInfo.extra[?'authentication.kubernetes.io/pod-name'].orValue([''])[0] != '' && object.spec.holderIdentity.startsWith(request.userInfo.extra[?'authentication.kubernetes.io/pod-name'].orValue([''])[0]))",
					Message: "bench: holder of another pod"},
				{Expression: "oldObject == null || !has(oldObject.spec.renewTime) || !has(object.spec.renewTime) || timestamp(object.spec.renewTime) >= timestamp(oldObject.spec.renewTime)",
					Message: "bench: renewTime backwards"},
			},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-identity"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "bench-identity",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	api := b.admin.AdmissionregistrationV1
	return &setup{
		name: "vap", namespace: selectedNS,
		install: func(ctx context.Context) error {
			if _, err := api().ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := api().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
		uninstall: func(ctx context.Context) error {
			_ = api().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
			return api().ValidatingAdmissionPolicies().Delete(ctx, pol.Name, metav1.DeleteOptions{})
		},
		prove: b.refusesIntruder(selectedNS, "bench: not the bound manager"),
	}
}

// noopSetup calls a controller-runtime webhook that decodes the review and
// allows: what any webhook costs before it decides anything. Scoped to ns
// by a namespaceSelector, as leaseguard's is; with ns empty it is matched by
// its rules only (noop-plain: the floor of any webhook on Leases).
func (b *bench) noopSetup(name, url, ns string) *setup {
	cfg := b.webhookConfiguration("bench-"+name, url, ns)
	api := b.admin.AdmissionregistrationV1
	return &setup{
		name: name, namespace: selectedNS,
		install: func(ctx context.Context) error {
			_, err := api().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
			return err
		},
		uninstall: func(ctx context.Context) error {
			return api().ValidatingWebhookConfigurations().Delete(ctx, cfg.Name, metav1.DeleteOptions{})
		},
		prove: func(ctx context.Context) error {
			before := b.noopCalls()
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if err := b.intruderWrite(ctx, selectedNS); err != nil {
					return err
				}
				if b.noopCalls() > before {
					return nil
				}
			}
			return fmt.Errorf("the no-op webhook was not called")
		},
	}
}

// routedNoopSetup installs the configuration leaseguard renders for the
// bench policy with every webhook pointing at the no-op: the floor of any
// webhook routed as leaseguard's is, so that leaseguard-selected against it
// is what leaseguard itself adds.
func (b *bench) routedNoopSetup(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) *setup {
	s := b.noopSetup("noop-routed", "", "")
	api := b.admin.AdmissionregistrationV1
	s.install = func(ctx context.Context) error {
		_, err := api().ValidatingWebhookConfigurations().Create(ctx, cfg.DeepCopy(), metav1.CreateOptions{})
		return err
	}
	s.uninstall = func(ctx context.Context) error {
		return api().ValidatingWebhookConfigurations().Delete(ctx, cfg.Name, metav1.DeleteOptions{})
	}
	// The intruder's write is an identity change: routed to the fail-closed
	// webhook, which is the no-op here.
	return s
}

// webhookConfiguration scopes a webhook as leaseguard's generated one is:
// the Leases of one namespace (every Lease when ns is empty), failurePolicy
// Fail.
func (b *bench) webhookConfiguration(name, url, ns string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: name + ".leaseguard.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, FailurePolicy: &fail,
			TimeoutSeconds: ptr.To[int32](2),
			ClientConfig:   admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: b.cp.CAData()},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
			}},
		}},
	}
	if ns != "" {
		cfg.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	}
	return cfg
}

// leaseguardSetup installs the configuration leaseguard renders for the
// bench policy; the renewals are in ns.
func (b *bench) leaseguardSetup(r *manifests.Rendered, ns string) *setup {
	api := b.admin.AdmissionregistrationV1
	s := &setup{
		name: "leaseguard-" + map[string]string{selectedNS: "selected", unselectedNS: "unselected"}[ns], namespace: ns,
		install: func(ctx context.Context) error {
			_, err := api().ValidatingWebhookConfigurations().Create(ctx, r.Validating, metav1.CreateOptions{})
			return err
		},
		uninstall: func(ctx context.Context) error {
			return api().ValidatingWebhookConfigurations().Delete(ctx, r.Validating.Name, metav1.DeleteOptions{})
		},
	}
	if ns == selectedNS {
		s.prove = b.refusesIntruder(ns, "leaseguard: rule bench: system:serviceaccount:"+ns+":intruder is not a manager of lease")
		return s
	}
	// Unselected: the intruder's write goes through, and leaseguard is not
	// even asked, while it is asked for the selected namespace.
	s.prove = func(ctx context.Context) error {
		if err := b.refusesIntruder(selectedNS, "leaseguard: rule bench")(ctx); err != nil {
			return err
		}
		before, err := b.decisions(ctx)
		if err != nil {
			return err
		}
		if err := b.intruderWrite(ctx, ns); err != nil {
			return fmt.Errorf("a write no rule selects was refused: %w", err)
		}
		after, err := b.decisions(ctx)
		if err != nil {
			return err
		}
		if after != before {
			return fmt.Errorf("leaseguard was called for a lease no rule selects (%v decisions, was %v)", after, before)
		}
		return nil
	}
	return s
}

func (b *bench) decisions(ctx context.Context) (float64, error) {
	fams, err := b.guard.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return controlplane.Counter(fams, "leaseguard_decisions_total", nil), nil
}
