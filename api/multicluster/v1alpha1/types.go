// Package v1alpha1 has the fields of Config Connector's MultiClusterLease
// (multicluster.core.cnrm.cloud.google.com/v1alpha1) that leaseguard reads.
// It is written from the documented object shape (docs/design.md §2), not generated, and
// is used only to decode admission requests.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, version, kind and resource of MultiClusterLease.
const (
	Group    = "multicluster.core.cnrm.cloud.google.com"
	Version  = "v1alpha1"
	Kind     = "MultiClusterLease"
	Resource = "multiclusterleases"
	// Finalizer is the finalizer the MultiClusterLease controller adds.
	Finalizer = "multiclusterlease.core.cnrm.cloud.google.com/finalizer"
)

// GroupVersionResource of MultiClusterLease.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// MultiClusterLease is a lease shared by the candidates of several clusters.
type MultiClusterLease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MultiClusterLeaseSpec   `json:"spec,omitempty"`
	Status MultiClusterLeaseStatus `json:"status,omitempty"`
}

// MultiClusterLeaseSpec is written by the candidates.
type MultiClusterLeaseSpec struct {
	HolderIdentity       *string           `json:"holderIdentity,omitempty"`
	RenewTime            *metav1.MicroTime `json:"renewTime,omitempty"`
	LeaseDurationSeconds *int32            `json:"leaseDurationSeconds,omitempty"`
	RenewDeadlineSeconds *int32            `json:"renewDeadlineSeconds,omitempty"`
	RetryPeriodSeconds   *int32            `json:"retryPeriodSeconds,omitempty"`
}

// MultiClusterLeaseStatus is written by the MultiClusterLease controller.
type MultiClusterLeaseStatus struct {
	Conditions                 []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration         *int64             `json:"observedGeneration,omitempty"`
	GlobalHolderIdentity       *string            `json:"globalHolderIdentity,omitempty"`
	GlobalRenewTime            *string            `json:"globalRenewTime,omitempty"`
	GlobalLeaseDurationSeconds *int32             `json:"globalLeaseDurationSeconds,omitempty"`
	GlobalLeaseTransitions     *int32             `json:"globalLeaseTransitions,omitempty"`
}
