//go:build tools

// Package tools records the main packages built by this module so that
// `go mod tidy` keeps their dependencies: the control plane of the tests
// (etcd, kube-apiserver, kubectl) and the node components of the cluster
// harness in test/cluster (kubelet, kube-controller-manager, kube-scheduler,
// kube-proxy), and kubeadm for the kind node image (hack/kind).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
