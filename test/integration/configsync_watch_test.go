package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/config"
	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/configsync"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// The admission configuration is kept by a controller that watches each
// object it keeps, so an edit is repaired within seconds, not at the next
// resync (issue 40 item 8; before, configsync polled once a minute). The
// syncer runs in process against a control plane of its own (its objects
// call no webhook server, and the shared suite's leaseguard would repair
// them too), as the service account the install binds to config/rbac's
// ClusterRole: get, list, watch and update limited by name, so the watches
// must select their object by name for RBAC to let them through. Its
// resync is an hour: any repair inside the test came from a watch event.
func TestConfigurationEditsAreRepairedWithinSecondsByWatching(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data, err := config.Files.ReadFile(config.SamplePolicyPath)
	if err != nil {
		t.Fatal(err)
	}
	own, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = own.Stop() }()
	ownAdmin, err := kubernetes.NewForConfig(own.Config)
	if err != nil {
		t.Fatal(err)
	}

	// The install's ClusterRole, bound to the service account.
	const sa = "system:serviceaccount:leaseguard-system:leaseguard"
	role := installedClusterRole(t)
	if _, err := ownAdmin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ownAdmin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "it-watch"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: sa}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asSA := rest.CopyConfig(own.Config)
	asSA.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	saClient, err := kubernetes.NewForConfig(asSA)
	if err != nil {
		t.Fatal(err)
	}

	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	rec := &syncRecorder{}
	syncer := &configsync.Syncer{
		Client: saClient, Config: asSA, Prefix: manifests.Defaults().Prefix, Namespace: "leaseguard-system",
		Policies: staticPolicies{p, sha}, Recorder: rec, Log: testr.New(t), Resync: time.Hour,
	}
	runErr := make(chan error, 1)
	go func() { runErr <- syncer.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("the syncer stopped with: %v", err)
		}
	}()

	vwcs := ownAdmin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	const vwcName = "leaseguard-validating-webhook-configuration"
	validating := func() *admissionregistrationv1.ValidatingWebhookConfiguration {
		t.Helper()
		v, err := vwcs.Get(ctx, vwcName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	waitFor(t, "the syncer's first rendering", func() bool {
		return validating().Annotations[configsync.PolicyAnnotation] == sha && rec.inSync()
	})

	failClosedIntact := func() bool {
		for _, w := range validating().Webhooks {
			if w.Name == manifests.ValidateWebhook {
				return ptr.Deref(w.FailurePolicy, "") == admissionregistrationv1.Fail && len(w.MatchConditions) > 0 && w.MatchConditions[0].Name != "nothing"
			}
		}
		return false
	}
	// Three edits in a row, each repaired within 10 s. A poll at the
	// hour's resync would repair none.
	for i := range 3 {
		v := validating()
		for j := range v.Webhooks {
			if v.Webhooks[j].Name == manifests.ValidateWebhook {
				v.Webhooks[j].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
				v.Webhooks[j].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "nothing", Expression: "false"}}
			}
		}
		if _, err := vwcs.Update(ctx, v, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		edited := time.Now()
		waitWithin(t, fmt.Sprintf("edit %d of the fail-closed webhook to be repaired", i+1), 10*time.Second, failClosedIntact)
		t.Logf("edit %d repaired in %v", i+1, time.Since(edited).Round(10*time.Millisecond))
	}

	// The renewals policy the API server evaluates: same.
	vaps := ownAdmin.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	vap, err := vaps.Get(ctx, "leaseguard-renewals", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rendered := vap.Spec.Validations
	vap.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "true"}}
	if _, err := vaps.Update(ctx, vap, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, "the edited renewals policy to be repaired", 10*time.Second, func() bool {
		v, err := vaps.Get(ctx, "leaseguard-renewals", metav1.GetOptions{})
		return err == nil && len(v.Spec.Validations) == len(rendered) && v.Spec.Validations[0].Expression == rendered[0].Expression
	})
	// The sync records its repairs once the whole configuration is
	// synced: a moment after the last repair shows.
	waitWithin(t, "the 4 repairs recorded (leaseguard_admission_configuration_repairs_total)", 10*time.Second, func() bool { return rec.repairs() >= 4 })
}

// installedClusterRole is config/rbac's ClusterRole, as the install applies it.
func installedClusterRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "config", "rbac", "admission_configuration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); err != nil {
			t.Fatalf("no ClusterRole in config/rbac/admission_configuration.yaml: %v", err)
		}
		if role.Kind == "ClusterRole" {
			for _, r := range role.Rules {
				if len(r.ResourceNames) == 0 || !strings.Contains(strings.Join(r.Verbs, ","), "watch") {
					t.Fatalf("rule %v: want every rule limited by name and allowing watch", r)
				}
			}
			return &role
		}
	}
}

type staticPolicies struct {
	p   *policy.Policy
	sha string
}

func (s staticPolicies) InForce() (*policy.Policy, string) { return s.p, s.sha }
func (s staticPolicies) Changed() <-chan struct{}          { return nil }

// syncRecorder keeps what the syncer reported.
type syncRecorder struct {
	mu       sync.Mutex
	last     bool
	repaired int
}

func (r *syncRecorder) AdmissionConfigurationSync(inSync, _ bool, _, repaired int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = inSync
	r.repaired += repaired
}

func (r *syncRecorder) inSync() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func (r *syncRecorder) repairs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.repaired
}
