#!/usr/bin/env bash
# Builds the control-plane binaries the tests and `leaseguard dev` run against
# (kube-apiserver, etcd, kubectl) from source, at the versions pinned in
# test/tools/go.mod, into a cache folder. Only the first run pays (about six
# minutes on a cold Go cache for kube-apiserver); a binary already in the cache
# is never rebuilt.
#
# With --kind it also builds what the kind node image needs
# (hack/kind/node-image.sh): kubelet, kube-controller-manager,
# kube-scheduler, kube-proxy and kubeadm, from the same pinned
# k8s.io/kubernetes (about seven minutes more on a cold cache once
# kube-apiserver's packages are built).
#
# Usage: hack/controlplane.sh DEST_DIR [--kind]
set -euo pipefail

dest=${1:?usage: hack/controlplane.sh DEST_DIR [--kind]}
node=${2:-}
case "$node" in
"" | --kind) ;;
*)
	echo "usage: hack/controlplane.sh DEST_DIR [--kind]" >&2
	exit 2
	;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/test/tools"

k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$tools/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$tools/go.mod")
major=$(echo "${k8s_version#v}" | cut -d. -f1)
minor=$(echo "${k8s_version#v}" | cut -d. -f2)

mkdir -p "$dest"

# The API server reports the version stamped here (kubectl version, /version),
# so the build says what it really is instead of v0.0.0-master.
version_flags() {
	local pkg
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		printf -- '-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
			"$pkg" "$k8s_version" "$pkg" "$major" "$pkg" "$minor" "$pkg"
	done
}

build() { # name package ldflags
	local name=$1 pkg=$2 ldflags=$3
	if [ -x "$dest/$name" ]; then
		echo "controlplane: $name cached at $dest/$name"
		return
	fi
	echo "controlplane: building $name from $pkg (first run only; kube-apiserver takes minutes)..."
	local start=$SECONDS
	(cd "$tools" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$dest/$name.tmp" "$pkg")
	mv "$dest/$name.tmp" "$dest/$name"
	echo "controlplane: built $name in $((SECONDS - start))s"
}

build etcd go.etcd.io/etcd/server/v3 "-X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version"
build kubectl k8s.io/kubernetes/cmd/kubectl "$(version_flags)"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(version_flags)"
echo "controlplane: kube-apiserver $k8s_version, etcd $etcd_version, kubectl $k8s_version ready in $dest"
if [ "$node" = --kind ]; then
	for component in kube-controller-manager kube-scheduler kube-proxy kubelet; do
		build "$component" "k8s.io/kubernetes/cmd/$component" "$(version_flags)"
	done
	build kubeadm k8s.io/kubernetes/cmd/kubeadm "$(version_flags)"
	echo "controlplane: kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubeadm $k8s_version ready in $dest"
fi
