package controlplane

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// LeaseWritersRole lets every authenticated user read and write Leases and
// MultiClusterLeases, as the managers of a real cluster can through their own
// RBAC. On the local control plane, managers are impersonated users, and
// leaseguard, not RBAC, is what tells them apart.
const LeaseWritersRole = "leaseguard-test-lease-writers"

// GrantLeaseAccess creates LeaseWritersRole and binds it to
// system:authenticated. It is idempotent.
func GrantLeaseAccess(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseWritersRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}},
			{APIGroups: []string{"multicluster.core.cnrm.cloud.google.com"}, Resources: []string{"multiclusterleases", "multiclusterleases/status"}, Verbs: []string{"*"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseWritersRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: LeaseWritersRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:authenticated"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// SetCABundle makes leaseguard's webhook configurations trust ca.
func SetCABundle(ctx context.Context, cfg *rest.Config, ca []byte) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	api := cs.AdmissionregistrationV1()
	v, err := api.ValidatingWebhookConfigurations().Get(ctx, "leaseguard-validating-webhook-configuration", metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = ca
	}
	if _, err := api.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		return err
	}
	m, err := api.MutatingWebhookConfigurations().Get(ctx, "leaseguard-mutating-webhook-configuration", metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = ca
	}
	_, err = api.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
	return err
}
