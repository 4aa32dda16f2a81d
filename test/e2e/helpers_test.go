package e2e

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// boundLease is team's lease (or the one named) held by holder.
func boundLease(team, holder string, name ...string) *coordinationv1.Lease {
	n := "kcc-leader-" + team
	if len(name) > 0 {
		n = name[0]
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: e2eNS, Name: n},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15)},
	}
}
